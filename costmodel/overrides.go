package costmodel

import (
	"fmt"

	"github.com/collplan/collplan/tables"
)

// algoKeys are the node tables' names for algorithms, in NCCL's order.
var algoKeys = [NumAlgos]string{"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"}

// hwKeys are the node tables' names for the latency classes.
var hwKeys = [NumHW]string{"nvlink", "pci", "net"}

// Apply overwrites k with a node table's [constants] (a tuner v5 init's power). Absent entries keep
// their value; rows of the wrong shape are errors naming the key.
func (k *Constants) Apply(o *tables.Constants) error {
	if o == nil {
		return nil
	}
	row := func(dst *[NumProtos]float64, src []float64, key string) error {
		if len(src) != NumProtos {
			return fmt.Errorf("constants.%s: want %d values [LL, LL128, Simple], got %d", key, NumProtos, len(src))
		}
		copy(dst[:], src)
		return nil
	}
	for name, v := range o.BaseLatencies {
		a, ok := algoIndex(name)
		if !ok {
			return fmt.Errorf("constants.base_latencies.%s: unknown algorithm", name)
		}
		if err := row(&k.BaseLat[a], v, "base_latencies."+name); err != nil {
			return err
		}
	}
	for hwName, algos := range o.HWLatencies {
		hw := -1
		for i, n := range hwKeys {
			if n == hwName {
				hw = i
			}
		}
		if hw < 0 {
			return fmt.Errorf("constants.hw_latencies.%s: unknown hardware class (want nvlink, pci or net)", hwName)
		}
		for name, v := range algos {
			a, ok := algoIndex(name)
			if !ok {
				return fmt.Errorf("constants.hw_latencies.%s.%s: unknown algorithm", hwName, name)
			}
			if err := row(&k.HWLat[hw][a], v, "hw_latencies."+hwName+"."+name); err != nil {
				return err
			}
		}
	}
	for _, c := range []struct {
		key string
		src [][]float64
		dst *[4][3]float64
	}{{"ll_max_bws", o.LLMaxBws, &k.LLMaxBws}, {"per_ch_max_ring_ll128_bws", o.PerChMaxRingLL128Bws, &k.PerChMaxRingLL128Bws},
		{"per_ch_max_tree_ll128_bws", o.PerChMaxTreeLL128Bws, &k.PerChMaxTreeLL128Bws},
		{"per_ch_max_tree_bws", o.PerChMaxTreeBws, &k.PerChMaxTreeBws},
		{"per_ch_max_nvls_tree_bws", o.PerChMaxNVLSTreeBws, &k.PerChMaxNVLSTreeBws}} {
		if c.src == nil {
			continue
		}
		if len(c.src) != 4 {
			return fmt.Errorf("constants.%s: want 4 rows, got %d", c.key, len(c.src))
		}
		for i, r := range c.src {
			if len(r) != 3 {
				return fmt.Errorf("constants.%s[%d]: want 3 values [N1, N2, N4], got %d", c.key, i, len(r))
			}
			copy(c.dst[i][:], r)
		}
	}
	return nil
}

func algoIndex(name string) (Algo, bool) {
	for i, n := range algoKeys {
		if n == name {
			return Algo(i), true
		}
	}
	return 0, false
}
