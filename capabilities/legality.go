package capabilities

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Mask records, for every (collective, algorithm, protocol) cell, why the cell is off; "" means on.
// It is the enable state NCCL's ncclTopoTuneModel resolves (reference/nccl-costmodel.md §5): the
// NCCL_ALGO/NCCL_PROTO matrices, the forced algorithm disables and the LL128 auto gate.
type Mask struct {
	Reason [NumColls][NumAlgos][NumProtos]string
}

// Legal reports whether the cell is enabled.
func (m *Mask) Legal(c Coll, a Algo, p Proto) bool { return m.Reason[c][a][p] == "" }

// Enabled resolves §5 for a topology as NCCL 2.30.7 does. Env values that do not parse are errors
// naming the variable, its source and the bad token.
func Enabled(t *Topology) (Mask, error) { return EnabledFor(t, Legality{}) }

// EnabledFor is Enabled with an older release's enable rules l (reference §14).
func EnabledFor(t *Topology, l Legality) (Mask, error) {
	var m Mask
	algoM, protoM, err := envMatrices(t, l)
	if err != nil {
		return m, err
	}
	c2c, err := EnvInt(t.Env.LL128C2C, "NCCL_LL128_C2C", 1)
	if err != nil {
		return m, err
	}
	for c := Coll(0); c < NumColls; c++ {
		for a := Algo(0); a < NumAlgos; a++ {
			forced := forcedDisable(t, a)
			for p := Proto(0); p < NumProtos; p++ {
				var why string
				switch {
				case forced != "":
					why = forced
				case algoM[c][a] == 0:
					why = fmt.Sprintf("disabled by NCCL_ALGO=%q (%s)", t.Env.Algo.Value, t.Env.Algo.Source)
				case protoM[c][p] == 0:
					why = fmt.Sprintf("disabled by NCCL_PROTO=%q (%s)", t.Env.Proto.Value, t.Env.Proto.Source)
				case protoM[c][p] == 2 && p == LL128:
					why = ll128GateFor(t, c, a, c2c != 0, l.LL128SameCompCap)
					if why == "" && l.LL128CompCaps != nil && !slices.Contains(l.LL128CompCaps, t.MinCompCap) {
						why = fmt.Sprintf("LL128 auto gate: compute capability %d is not one of %v (this release's list)", t.MinCompCap, l.LL128CompCaps)
					}
				}
				m.Reason[c][a][p] = why
			}
		}
	}
	return m, nil
}

// forcedDisable is §5's list of algorithms off for every function whatever the env says.
func forcedDisable(t *Topology, a Algo) string {
	switch {
	case a == NVLSTree && t.NNodes == 1:
		return "NVLSTree needs more than one node"
	case (a == CollNetDirect || a == CollNetChain) && !t.CollNetEnable:
		return "CollNet not enabled (collnet_enable = false)"
	case a == NVLS && t.NNodes > 1 && !t.CollNetEnable:
		return "multi-node NVLS needs CollNet (collnet_enable = false)"
	case (a == CollNetDirect || a == CollNetChain) && t.NNodes == 1 && t.Emulated.ReducingNetwork:
		return "CollNet on one node: the emulated reducing network reduces across 2 or more nodes"
	case a == NVLS && t.NNodes > 1 && t.Emulated.ReducingNetwork:
		return "multi-node NVLS: the emulated reducing network does not run NVLS over CollNet"
	case a == CollNetChain && !t.CollNetChainSupport:
		return "CollNetChain not supported (collnet_chain_support = false)"
	case a == CollNetDirect && t.NVSCount == 0 && !t.Emulated.MulticastSwitch:
		return "CollNetDirect needs an NVSwitch (nvs_count = 0)"
	}
	return ""
}

// ll128Gate is the LL128 auto rule of §5; it returns "" when LL128 stays on.
func ll128Gate(t *Topology, c Coll, a Algo, c2c bool) string {
	return ll128GateFor(t, c, a, c2c, false)
}

// ll128GateFor is ll128Gate; sameCC is the rule of 2.29 and older: mixed compute capabilities
// never pass.
func ll128GateFor(t *Topology, c Coll, a Algo, c2c, sameCC bool) string {
	g := t.Graphs.For(a)
	maxInter := PathPXB
	if c2c && t.MinCompCap >= 90 {
		maxInter = PathPXN
	}
	switch {
	case g.TypeInter > maxInter:
		return fmt.Sprintf("LL128 auto gate: type_inter %s > %s", g.TypeInter, maxInter)
	case g.TypeIntra > PathNVB:
		return fmt.Sprintf("LL128 auto gate: type_intra %s > NVB", g.TypeIntra)
	case t.MinCompCap != t.MaxCompCap && sameCC:
		return fmt.Sprintf("LL128 auto gate: mixed compute capabilities %d..%d (NCCL 2.29 and older need min == max)", t.MinCompCap, t.MaxCompCap)
	case t.MinCompCap != t.MaxCompCap && t.MinCompCap < 90:
		return fmt.Sprintf("LL128 auto gate: mixed compute capabilities %d..%d below 90", t.MinCompCap, t.MaxCompCap)
	case t.MinCompCap < 70:
		return fmt.Sprintf("LL128 auto gate: compute capability %d < 70", t.MinCompCap)
	case t.MinCompCap == 90 && t.CUDARTVersion == 11080 && c == AllReduce && a == Ring && t.NRanks == 2:
		return "LL128 auto gate: sm_90 with CUDA runtime 11.8, 2-rank ring AllReduce"
	}
	return ""
}

// PATEnabled is §5's PAT enable rule: off below compute capability 6.0; NCCL_PAT_ENABLE (default
// 2 = auto) decides otherwise, and auto needs one GPU per node and a host net device. The string
// is the reason when PAT is off.
func PATEnabled(t *Topology) (bool, string, error) {
	if t.MinCompCap < 60 {
		return false, fmt.Sprintf("PAT needs compute capability >= 60 (min_comp_cap = %d)", t.MinCompCap), nil
	}
	v, err := EnvInt(t.Env.PATEnable, "NCCL_PAT_ENABLE", 2)
	if err != nil {
		return false, "", err
	}
	switch {
	case v == 0:
		return false, fmt.Sprintf("PAT disabled by NCCL_PAT_ENABLE=0 (%s)", t.Env.PATEnable.Source), nil
	case v != 2:
		return true, "", nil
	case t.NNodes != t.NRanks:
		return false, "PAT auto: needs one rank per node", nil
	case t.NetDeviceType != NetHost:
		return false, fmt.Sprintf("PAT auto: net device type %s is not host", t.NetDeviceType), nil
	}
	return true, "", nil
}

// Support returns, per algorithm, why a query of (coll, op, dtype) cannot use it ("" when it can):
// the whole-row rules of NCCL's cost-table setup (reference §8 steps 2-3, with §9's NVLS op
// support) and the fp8 compute-capability rule of §9.
func Support(t *Topology, c Coll, op Op, dt Dtype) [NumAlgos]string {
	var rows [NumAlgos]string
	reduces := c == AllReduce || c == Reduce || c == ReduceScatter
	if dt.IsFP8() && reduces && t.MinCompCap < 90 {
		for a := range rows {
			rows[a] = fmt.Sprintf("fp8 reductions need compute capability >= 90 (min_comp_cap = %d)", t.MinCompCap)
		}
		return rows
	}
	collNet := collNetSupport(t, c, op, dt)
	nvlsOK := t.NVLSSupport && (c == AllGather || nvlsOpSupported(op, dt))
	for a := Algo(0); a < NumAlgos; a++ {
		switch a {
		case CollNetDirect, CollNetChain:
			if collNet != "" {
				rows[a] = collNet
			} else if t.MaxLocalRanks > 8 {
				rows[a] = fmt.Sprintf("CollNet needs at most 8 local ranks (max_local_ranks = %d)", t.MaxLocalRanks)
			}
		case NVLS, NVLSTree:
			switch {
			case !t.NVLSSupport:
				rows[a] = "NVLS not supported (nvls_support = false)"
			case !nvlsOK:
				rows[a] = fmt.Sprintf("NVLS does not reduce %s on %s", op, dt)
			case c != AllReduce && t.LocalRanks > 32:
				rows[a] = fmt.Sprintf("NVLS %s needs at most 32 local ranks (local_ranks = %d)", c, t.LocalRanks)
			case a == NVLS && collNet != "" && t.NNodes > 1:
				rows[a] = "multi-node NVLS needs CollNet support: " + collNet
			}
		case PAT:
			if c == ReduceScatter && (op == PreMulSum || op == Avg) {
				rows[a] = fmt.Sprintf("PAT ReduceScatter does not support %s", op)
			}
		}
	}
	return rows
}

// collNetSupport is §8's collNetSupport flag, as a reason ("" when supported). avg and premulsum
// count as sum; only AllReduce, Reduce and ReduceScatter consult the plugin's matrix.
func collNetSupport(t *Topology, c Coll, op Op, dt Dtype) string {
	if !t.CollNetEnable {
		return "CollNet not enabled (collnet_enable = false)"
	}
	if c != AllReduce && c != Reduce && c != ReduceScatter {
		return ""
	}
	netOp := op
	if op == Avg || op == PreMulSum {
		netOp = Sum
	}
	for _, s := range t.CollNetSupport {
		if s.Op == netOp && s.Dtype == dt {
			return ""
		}
	}
	return fmt.Sprintf("CollNet plugin does not reduce %s:%s", netOp, dt)
}

// nvlsOpSupported is ncclNvlsSupported (§9): Sum or Min/Max for {i32,u32,i64,u64,f16,bf16}, Sum
// only for {f32,f64}, nothing else.
func nvlsOpSupported(op Op, dt Dtype) bool {
	switch dt {
	case Int32, Uint32, Int64, Uint64, Float16, Bfloat16:
		return op == Sum || op == Min || op == Max
	case Float32, Float64:
		return op == Sum
	}
	return false
}

// EnvInt reads an integer NCCL variable (decimal or 0x hex), returning def when unset.
func EnvInt(s Setting, name string, def int) (int, error) {
	if !s.IsSet() || strings.TrimSpace(s.Value) == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(strings.TrimSpace(s.Value), 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q (%s): not an integer", name, s.Value, s.Source)
	}
	return int(v), nil
}
