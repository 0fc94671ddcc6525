package tables

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Word lists. tables imports no project package, so it keeps its own copies of the names the
// capabilities and costmodel packages use (reference/nccl-costmodel.md §0).
var (
	cpuArchs       = []string{"x86", "power", "arm"}
	cpuVendors     = []string{"intel", "amd", "zhaoxin", "mixed", "undefined"}
	netDeviceTypes = []string{"host", "unpack", "cuda"}
	pathTypes      = []string{"LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS"}
	scaleKeys      = []string{"1", "2", "4"}
	graphNames     = []string{"tree", "ring", "collnet_direct", "collnet_chain", "nvls"}
	algoNames      = []string{"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"}
	hwClasses      = []string{"nvlink", "pci", "net"}
	collNames      = []string{"broadcast", "reduce", "allgather", "reducescatter", "allreduce"}
	protoNames     = []string{"ll", "ll128", "simple"}
)

const (
	maxChannels       = 64 // NCCL's MAXCHANNELS
	minComputeCap     = 30
	maxComputeCap     = 200
	correctionBuckets = 24 // treeCorrectionFactor columns (reference §6)
	ceilingRows       = 4  // compute-capability / vendor rows of the ceilings (reference §1)
	perAlgoCols       = 3  // LL, LL128, Simple
	ceilingCols       = 3  // N1, N2, N4
)

func oneOf(list []string, w string) bool {
	for _, x := range list {
		if x == w {
			return true
		}
	}
	return false
}

func words(list []string) string { return strings.Join(list, " | ") }

func finiteNonNeg(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) && x >= 0 }

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// validator collects problems in a deterministic order.
type validator struct{ ps []problem }

func (v *validator) add(key, format string, args ...any) {
	v.ps = append(v.ps, problem{key: key, msg: fmt.Sprintf(format, args...)})
}

func (v *validator) intRange(key string, x, lo, hi int) {
	if x < lo || x > hi {
		v.add(key, "%d out of range %d..%d", x, lo, hi)
	}
}

func (v *validator) word(key string, list []string, w string) {
	if !oneOf(list, w) {
		v.add(key, "%q is not one of %s", w, words(list))
	}
}

func (v *validator) bw(key string, x float64) {
	if !finiteNonNeg(x) {
		v.add(key, "%v must be finite and >= 0", x)
	}
}

func (v *validator) row(key string, xs []float64, n int) {
	if len(xs) != n {
		v.add(key, "want %d values, got %d", n, len(xs))
		return
	}
	for i, x := range xs {
		v.bw(fmt.Sprintf("%s[%d]", key, i), x)
	}
}

func (v *validator) matrix(key string, rows [][]float64) {
	if rows == nil {
		return // absent: NCCL's default
	}
	if len(rows) != ceilingRows {
		v.add(key, "want %d rows of %d, got %d rows", ceilingRows, ceilingCols, len(rows))
		return
	}
	for i, r := range rows {
		v.row(fmt.Sprintf("%s[%d]", key, i), r, ceilingCols)
	}
}

// validate checks the values of a decoded table; keys in the problems are dotted paths.
func validate(n *Node) []problem {
	v := &validator{}
	ni := n.Node
	if strings.TrimSpace(ni.GPU) == "" {
		v.add("node.gpu", "must name the GPU (or CPU) model")
	}
	if ni.GPUsPerNode < 1 {
		v.add("node.gpus_per_node", "%d must be >= 1", ni.GPUsPerNode)
	}
	v.intRange("node.compute_capability", ni.ComputeCapability, minComputeCap, maxComputeCap)
	v.word("node.cpu_arch", cpuArchs, ni.CPUArch)
	v.word("node.cpu_vendor", cpuVendors, ni.CPUVendor)
	v.word("node.net_device_type", netDeviceTypes, ni.NetDeviceType)
	if ni.NVSCount < 0 {
		v.add("node.nvs_count", "%d must be >= 0", ni.NVSCount)
	}
	em := validateEmulation(v, n)
	if ni.NVLSSupport && ni.NVSCount == 0 {
		v.add("node.nvls_support", "NVLS needs an NVSwitch (nvs_count is 0)")
	}
	if ni.NVLSSupport && ni.ComputeCapability < 90 {
		v.add("node.nvls_support", "NVLS needs compute capability >= 90 (have %d)", ni.ComputeCapability)
	}
	if ni.CUDARTVersion < 0 {
		v.add("node.cudart_version", "%d must be >= 0", ni.CUDARTVersion)
	}
	v.intRange("node.max_tree_pattern", ni.MaxTreePattern, 1, 3)
	if ni.CollNetHeadsNum < 0 {
		v.add("node.collnet_heads_num", "%d must be >= 0", ni.CollNetHeadsNum)
	}
	if ni.CollNetDirectNHeads < 0 {
		v.add("node.collnet_direct_n_heads", "%d must be >= 0", ni.CollNetDirectNHeads)
	}
	for i, s := range ni.CollNetSupport {
		op, dt, ok := strings.Cut(s, ":")
		if !ok || op == "" || dt == "" || strings.ContainsAny(s, " \t") {
			v.add(fmt.Sprintf("node.collnet_support[%d]", i), "%q is not \"op:dtype\"", s)
		}
	}

	if len(n.Scale) == 0 {
		v.add("scale", "at least one of [scale.1], [scale.2], [scale.4] is needed")
	}
	for _, k := range sortedKeys(n.Scale) {
		validateScale(v, "scale."+k, k, n.Scale[k], ni.NVLSSupport || em.MulticastSwitch)
	}
	if c := n.Constants; c != nil {
		validateConstants(v, c)
	}
	if c := n.Corrections; c != nil {
		validateCorrections(v, c)
	}
	if f := n.Fit; f != nil {
		validateFit(v, f, n.Sources)
	}
	validateProvenance(v, &n.Provenance)
	return v.ps
}

// validateEmulation checks [emulation] and returns it (the zero value when absent). Only an
// emulated node (node.gpu = "cpu") may have the table: on any other each key it sets is an error
// (the table itself when it sets none). nvls_efficiency is 0 < e <= 1 and goes with
// multicast_switch; reducing_network needs node.collnet_support.
func validateEmulation(v *validator, n *Node) Emulation {
	if n.Emulation == nil {
		return Emulation{}
	}
	em := *n.Emulation
	if !n.Node.IsCPU() {
		why := fmt.Sprintf("only an emulated node (node.gpu = %q, collplan's CPU engine) declares what it emulates; node.gpu is %q", CPUGPU, n.Node.GPU)
		keys := 0
		for _, f := range []struct {
			key string
			set bool
		}{{"multicast_switch", em.MulticastSwitch}, {"nvls_efficiency", em.NVLSEfficiency != 0}, {"reducing_network", em.ReducingNetwork}} {
			if f.set {
				v.add("emulation."+f.key, "%s", why)
				keys++
			}
		}
		if keys == 0 {
			v.add("emulation", "%s", why)
		}
		return Emulation{}
	}
	e := em.NVLSEfficiency
	switch {
	case em.MulticastSwitch && (math.IsNaN(e) || e <= 0 || e > 1):
		v.add("emulation.nvls_efficiency", "%v: emulation.multicast_switch needs 0 < nvls_efficiency <= 1 (NCCL's nvlsEfficiency row for compute capability %d does not price an emulated switch)", e, n.Node.ComputeCapability)
	case !em.MulticastSwitch && e != 0:
		v.add("emulation.nvls_efficiency", "%v without emulation.multicast_switch = true", e)
	}
	if em.ReducingNetwork && len(n.Node.CollNetSupport) == 0 {
		v.add("emulation.reducing_network", "needs node.collnet_support: the \"op:dtype\" pairs the emulated network reduces")
	}
	return em
}

func validateScale(v *validator, key, k string, s Scale, nvls bool) {
	if !oneOf(scaleKeys, k) {
		v.add(key, "scale key %q is not one of %s (1 node, 2 nodes, 4 or more)", k, words(scaleKeys))
		return
	}
	v.intRange(key+".comm_n_channels", s.CommNChannels, 1, maxChannels)
	v.intRange(key+".nvls_channels", s.NVLSChannels, 0, maxChannels)
	if !nvls && s.NVLSChannels != 0 {
		v.add(key+".nvls_channels", "%d but node.nvls_support is false and no emulation.multicast_switch (NCCL zeroes it)", s.NVLSChannels)
	}
	for _, g := range sortedKeys(s.Graphs) {
		gk := key + ".graphs." + g
		if !oneOf(graphNames, g) {
			v.add(gk, "graph %q is not one of %s", g, words(graphNames))
			continue
		}
		gr := s.Graphs[g]
		v.intRange(gk+".n_channels", gr.NChannels, 0, maxChannels)
		v.bw(gk+".bw_intra", gr.BwIntra)
		v.bw(gk+".bw_inter", gr.BwInter)
		v.bw(gk+".latency_inter", gr.LatencyInter)
		v.word(gk+".type_intra", pathTypes, gr.TypeIntra)
		v.word(gk+".type_inter", pathTypes, gr.TypeInter)
	}
	tree, okT := s.Graphs["tree"]
	ring, okR := s.Graphs["ring"]
	if okT && okR && tree.NChannels != ring.NChannels {
		v.add(key+".graphs.tree.n_channels", "%d differs from ring's %d (NCCL forces them equal)", tree.NChannels, ring.NChannels)
	}
}

func validateConstants(v *validator, c *Constants) {
	for _, a := range sortedKeys(c.BaseLatencies) {
		k := "constants.base_latencies." + a
		if !oneOf(algoNames, a) {
			v.add(k, "algorithm %q is not one of %s", a, words(algoNames))
			continue
		}
		v.row(k, c.BaseLatencies[a], perAlgoCols)
	}
	for _, hw := range sortedKeys(c.HWLatencies) {
		k := "constants.hw_latencies." + hw
		if !oneOf(hwClasses, hw) {
			v.add(k, "hardware class %q is not one of %s", hw, words(hwClasses))
			continue
		}
		for _, a := range sortedKeys(c.HWLatencies[hw]) {
			ka := k + "." + a
			if !oneOf(algoNames, a) {
				v.add(ka, "algorithm %q is not one of %s", a, words(algoNames))
				continue
			}
			v.row(ka, c.HWLatencies[hw][a], perAlgoCols)
		}
	}
	v.matrix("constants.ll_max_bws", c.LLMaxBws)
	v.matrix("constants.per_ch_max_ring_ll128_bws", c.PerChMaxRingLL128Bws)
	v.matrix("constants.per_ch_max_tree_ll128_bws", c.PerChMaxTreeLL128Bws)
	v.matrix("constants.per_ch_max_tree_bws", c.PerChMaxTreeBws)
	v.matrix("constants.per_ch_max_nvls_tree_bws", c.PerChMaxNVLSTreeBws)
}

func validateCorrections(v *validator, c *Corrections) {
	seen := map[string]int{}
	for i, cell := range c.Cell {
		k := fmt.Sprintf("corrections.cell[%d]", i)
		v.word(k+".coll", collNames, cell.Coll)
		v.word(k+".algo", algoNames, cell.Algo)
		v.word(k+".proto", protoNames, cell.Proto)
		id := cell.Coll + "/" + cell.Algo + "/" + cell.Proto
		if cell.Nodes != 0 || cell.RanksPerNode != 0 {
			v.intRange(k+".nodes", cell.Nodes, 1, maxFitNodes)
			v.intRange(k+".ranks_per_node", cell.RanksPerNode, 1, maxFitNodes)
			id += fmt.Sprintf(" at %d x %d", cell.Nodes, cell.RanksPerNode)
		}
		if j, dup := seen[id]; dup {
			v.add(k, "duplicate cell %s (also corrections.cell[%d])", id, j)
		} else {
			seen[id] = i
		}
		if len(cell.Factors) == 0 || len(cell.Factors) > correctionBuckets {
			v.add(k+".factors", "want 1..%d factors, got %d", correctionBuckets, len(cell.Factors))
		}
		for j, f := range cell.Factors {
			if math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
				v.add(fmt.Sprintf("%s.factors[%d]", k, j), "%v must be finite and > 0", f)
			}
		}
	}
}

// maxFitNodes bounds [[fit.cell]].nodes (NCCL's node counts fit comfortably below it).
const maxFitNodes = 1 << 16

// validateFit checks [[fit.cell]]; sources (the table's source tags) tell a ranks_per_node written
// as 0, an error, from one left out.
func validateFit(v *validator, f *Fit, sources map[string]string) {
	seen := map[string]int{}
	for i, cell := range f.Cell {
		k := fmt.Sprintf("fit.cell[%d]", i)
		v.word(k+".coll", collNames, cell.Coll)
		v.word(k+".algo", algoNames, cell.Algo)
		v.word(k+".proto", protoNames, cell.Proto)
		v.intRange(k+".nodes", cell.Nodes, 1, maxFitNodes)
		id := fmt.Sprintf("%s/%s/%s at %d nodes", cell.Coll, cell.Algo, cell.Proto, cell.Nodes)
		if _, given := sources[k+".ranks_per_node"]; given || cell.RanksPerNode != 0 {
			v.intRange(k+".ranks_per_node", cell.RanksPerNode, 1, maxFitNodes)
			id += fmt.Sprintf(" x %d ranks per node", cell.RanksPerNode)
		}
		if j, dup := seen[id]; dup {
			v.add(k, "duplicate cell %s (also fit.cell[%d])", id, j)
		} else {
			seen[id] = i
		}
		v.bw(k+".lat_us", cell.LatUS)
		if !finiteNonNeg(cell.BWGBps) || cell.BWGBps == 0 {
			v.add(k+".bw_gbps", "%v must be finite and > 0", cell.BWGBps)
		}
		v.bw(k+".lat_sigma", cell.LatSigma)
		v.bw(k+".bw_sigma", cell.BWSigma)
		if cell.Points < 1 {
			v.add(k+".points", "%d must be >= 1", cell.Points)
		}
	}
}

func validateProvenance(v *validator, p *Provenance) {
	for i, f := range p.FittedFrom {
		k := fmt.Sprintf("provenance.fitted_from[%d]", i)
		if strings.TrimSpace(f.File) == "" {
			v.add(k+".file", "must name the sweep file")
		}
		if f.SHA256 != "" && !isHexN(f.SHA256, 64) {
			v.add(k+".sha256", "%q is not 64 hex digits", f.SHA256)
		}
		if (f.Nodes == 0) != (f.RanksPerNode == 0) || f.Nodes < 0 || f.RanksPerNode < 0 {
			v.add(k, "nodes %d, ranks_per_node %d: give both (>= 1), or neither", f.Nodes, f.RanksPerNode)
		}
	}
	if r := p.Residual; r != nil {
		if r.Points < 0 {
			v.add("provenance.residual.points", "%d must be >= 0", r.Points)
		}
		v.bw("provenance.residual.median_rel", r.MedianRel)
		v.bw("provenance.residual.max_rel", r.MaxRel)
	}
}

func isHexN(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
