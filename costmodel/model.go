// Package costmodel is NCCL 2.30's alpha-beta cost model for collectives: from a Topology and the
// tuner constants it builds the latency and bandwidth of every (collective, algorithm, protocol)
// cell, and prices a call as time = latency*latCount + bytes/bandwidth. It is pure: no I/O, no
// globals, no logging.
//
// NCCL stores the tables as float32 and evaluates refinements with double constants in double,
// rounding back to float (reference/nccl-costmodel.md addendum 9); this port does the same, so its
// numbers match NCCL's to the last float32 ulp on amd64.
package costmodel

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/collplan/collplan/capabilities"
)

// The enumerations are defined in capabilities (at the bottom of the import graph) and re-exported
// here, where the model speaks of them.
type (
	Coll  = capabilities.Coll
	Algo  = capabilities.Algo
	Proto = capabilities.Proto
)

// Indices follow NCCL (reference §0).
const (
	Broadcast     = capabilities.Broadcast
	Reduce        = capabilities.Reduce
	AllGather     = capabilities.AllGather
	ReduceScatter = capabilities.ReduceScatter
	AllReduce     = capabilities.AllReduce
	NumColls      = capabilities.NumColls

	Tree          = capabilities.Tree
	Ring          = capabilities.Ring
	CollNetDirect = capabilities.CollNetDirect
	CollNetChain  = capabilities.CollNetChain
	NVLS          = capabilities.NVLS
	NVLSTree      = capabilities.NVLSTree
	PAT           = capabilities.PAT
	NumAlgos      = capabilities.NumAlgos

	LL        = capabilities.LL
	LL128     = capabilities.LL128
	Simple    = capabilities.Simple
	NumProtos = capabilities.NumProtos
)

// MaxDevWorkBatchColls is NCCL_MAX_DEV_WORK_BATCH_COLLS = 1024/sizeof(ncclDevWorkColl) = 8, the
// divisor of latCount for non-ring algorithms (reference §6).
const MaxDevWorkBatchColls = 8

// Table is the priced model of one communicator: NCCL's comm->latencies and comm->bandwidths
// (algorithm bandwidth, GB/s), maxThreads and threadThresholds, plus the inputs Time needs.
type Table struct {
	Lat [NumColls][NumAlgos][NumProtos]float32 // us
	BW  [NumColls][NumAlgos][NumProtos]float32 // GB/s, algorithm bandwidth; 0 means not usable
	// Reason says why a cell's bandwidth is 0 ("" when it is positive): a legality skip of the
	// model (latency 0 too), a §5 disable (latency kept), or a zero graph.
	Reason           [NumColls][NumAlgos][NumProtos]string
	MaxThreads       [NumAlgos][NumProtos]int
	ThreadThresholds [NumAlgos][NumProtos]int

	NNodes, NRanks, CommNChannels, MinCompCap int
	CPUArch                                   capabilities.CPUArch
	// Release is the NCCL release whose model built the table (Latest when built by Build).
	Release Release
	// latBatch is the release's latCount divisor for non-Ring algorithms (Rules.LatBatch); 0
	// means MaxDevWorkBatchColls.
	latBatch int
}

// Build runs NCCL's ncclTopoTuneModel (reference §2-§5) for topology t with constants k, as NCCL
// 2.30.7 (Latest) builds it. Env settings that do not parse are errors naming the variable.
func Build(t *capabilities.Topology, k *Constants) (*Table, error) {
	return BuildFor(t, k, Release{})
}

// BuildFor is Build as release r's ncclTopoTuneModel builds the table: the rules of r.Rules()
// (reference §14). The constants are the caller's: r.Constants() gives the release's defaults.
func BuildFor(t *capabilities.Topology, k *Constants, r Release) (*Table, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("costmodel: %w", err)
	}
	ru := r.Rules()
	tb := &Table{NNodes: t.NNodes, NRanks: t.NRanks, CommNChannels: t.CommNChannels,
		MinCompCap: t.MinCompCap, CPUArch: t.CPUArch, Release: ru.Release, latBatch: ru.LatBatch}
	if err := tb.setThreads(t); err != nil {
		return nil, fmt.Errorf("costmodel: %w", err)
	}
	if t.NRanks <= 1 {
		for c := range tb.Reason {
			for a := range tb.Reason[c] {
				for p := range tb.Reason[c][a] {
					tb.Reason[c][a][p] = "single rank: NCCL builds no model (n_ranks = 1)"
				}
			}
		}
		return tb, nil
	}
	if t.CPUArch == capabilities.ArchPower {
		// POWER hosts: hwLat[PCI][Tree][Simple] takes hwLat[PCI][Ring][Simple] (reference §1).
		kp := *k
		kp.HWLat[HWPCI][Tree][Simple] = kp.HWLat[HWPCI][Ring][Simple]
		k = &kp
	}
	mask, err := capabilities.EnabledFor(t, ru.Legality())
	if err != nil {
		return nil, fmt.Errorf("costmodel: %w", err)
	}
	patOn, patWhy, err := capabilities.PATEnabled(t)
	if err != nil {
		return nil, fmt.Errorf("costmodel: %w", err)
	}
	netOvh, err := netOverhead(t)
	if err != nil {
		return nil, fmt.Errorf("costmodel: %w", err)
	}
	for c := Coll(0); c < NumColls; c++ {
		for a := Algo(0); a < NumAlgos; a++ {
			for p := Proto(0); p < NumProtos; p++ {
				if why := modelSkip(t, &ru, c, a, p, patOn, patWhy); why != "" {
					tb.Reason[c][a][p] = why
					continue
				}
				bw, why := busBandwidth(t, &ru, k, c, a, p)
				tb.Lat[c][a][p] = latency(t, &ru, k, c, a, p, netOvh)
				if why == "" && !mask.Legal(c, a, p) {
					bw, why = 0, mask.Reason[c][a][p]
				}
				if why == "" && bw != bw {
					why = fmt.Sprintf("bandwidth NaN (graph for %s has no channels)", a)
				}
				if why == "" && bw == 0 {
					why = fmt.Sprintf("bandwidth 0 (graph for %s has no channels or no bandwidth)", a)
				}
				tb.BW[c][a][p], tb.Reason[c][a][p] = bw, why
			}
		}
	}
	return tb, nil
}

// nSteps is the step count of a ring pass: 2(n-1) for AllReduce, n-1 for AllGather and
// ReduceScatter, n for Broadcast and Reduce (reference §2).
func nSteps(c Coll, n int) int {
	switch c {
	case AllReduce:
		return 2 * (n - 1)
	case AllGather, ReduceScatter:
		return n - 1
	}
	return n
}

// modelSkip returns why NCCL's model loop skips a cell (bandwidth and latency stay 0), or "".
func modelSkip(t *capabilities.Topology, ru *Rules, c Coll, a Algo, p Proto, patOn bool, patWhy string) string {
	switch c {
	case Broadcast, Reduce:
		if a != Ring {
			return fmt.Sprintf("not modelled: %s uses Ring only", c)
		}
	case AllGather, ReduceScatter:
		if a != PAT && a != Ring && a != NVLS && a != CollNetDirect {
			return fmt.Sprintf("not modelled: %s uses PAT, Ring, NVLS or CollNetDirect", c)
		}
	case AllReduce:
		if a == PAT {
			return "not modelled: PAT has no AllReduce"
		}
	}
	if (a == NVLS || a == NVLSTree || a == PAT) && p != Simple {
		return fmt.Sprintf("not modelled: %s is Simple only", a)
	}
	if a == PAT && ru.PAT == 0 {
		return fmt.Sprintf("not modelled: NCCL %s has no PAT (added in 2.23)", ru.Release)
	}
	if a == PAT && !patOn {
		return patWhy
	}
	if (a == NVLS || a == NVLSTree) && t.Graphs.NVLS.NChannels < 2 {
		return fmt.Sprintf("not modelled: NVLS graph has %d channel(s), fewer than 2", t.Graphs.NVLS.NChannels)
	}
	return ""
}

// f32 rounds a double to NCCL's float storage.
func f32(x float64) float32 { return float32(x) }

// compCapIndex is reference §0's compCapIndex, capped at the release's last ceiling row
// (Rules.MaxCompCapIndex: Blackwell reads the Hopper row before 2.27).
func compCapIndex(t *capabilities.Topology, ru *Rules) int {
	return min(t.CompCapIndex(), ru.MaxCompCapIndex)
}

// index1 is reference §0's llMaxBws row: compCapIndex on one node, else 1 for AMD or mixed CPUs and
// 0 otherwise.
func index1(t *capabilities.Topology, ru *Rules) int {
	if t.NNodes == 1 {
		return compCapIndex(t, ru)
	}
	if t.CPUVendor == capabilities.VendorAMD || t.CPUVendor == capabilities.VendorMixed {
		return 1
	}
	return 0
}

// busBandwidth is reference §2 for one modelled cell: per-channel bandwidth, busBw = nCh*bw, the
// refinements in NCCL's order, then the busBw -> algBw ratio. A non-empty string says why the
// result is 0 (the CollNet rules of steps 8 and 10). The release rules ru change the Ring LL and
// LL128 factors, the NVLS model and the PAT factor (reference §14).
func busBandwidth(t *capabilities.Topology, ru *Rules, k *Constants, c Coll, a Algo, p Proto) (float32, string) {
	g := t.Graphs.For(a)
	cc, sc := compCapIndex(t, ru), t.ScaleIndex()
	nCh := g.NChannels
	ppn := float32(t.NRanks) / float32(t.NNodes)
	llMaxBw := k.LLMaxBws[index1(t, ru)][sc]

	bw := f32(g.BwInter)
	if t.NNodes <= 2 || a == CollNetDirect || a == CollNetChain {
		bw = f32(g.BwIntra)
	}
	if (a == NVLS || a == NVLSTree) && ru.NVLSBeforeEfficiency {
		// 2.19-2.27 (reference §14 "NVLS model"): min(bwIntra, bwInter), NVLSTree halving bwInter
		// above 2 nodes; no NVLSTree ceiling.
		inter := f32(g.BwInter)
		if a == NVLSTree && t.NNodes > 2 {
			inter /= 2
		}
		bw = min(f32(g.BwIntra), inter)
	} else if a == NVLS || a == NVLSTree {
		eff := nvlsEfficiency(cc)
		if e := t.Emulated.NVLSEfficiency; e > 0 { // an emulated switch's own (capabilities.Emulation)
			eff = e
		}
		intraBw := f32(float64(f32(g.BwIntra)) * eff * float64(nCh-1) / float64(nCh))
		if c == AllReduce {
			intraBw *= 2
		} else {
			intraBw *= (ppn - 1) / ppn
		}
		interBw := f32(g.BwInter)
		if a == NVLSTree && t.NNodes <= 2 {
			interBw *= 2
		}
		bw = min(intraBw, interBw)
		if a == NVLSTree {
			bw = f32(math.Min(float64(bw), k.PerChMaxNVLSTreeBws[cc][sc]))
		}
	}
	busBw := float32(nCh) * bw
	d := func() float64 { return float64(busBw) }
	fch := float64(nCh)

	if a == Ring && p == LL {
		f := 0.5
		if ru.RingLLQuarter { // <= 2.20 (reference §14 "Ring LL bw factor")
			f = 1.0 / 3.0
			if t.NNodes > 1 || c == AllReduce || c == Reduce {
				f = 1.0 / 4.0
			}
		}
		busBw = f32(math.Min(llMaxBw, d()*f))
	}
	if a == Ring && p == LL128 {
		f := 0.92
		if ru.RingLL128LowPPN && ppn < 2 { // <= 2.22 (reference §14 "Ring LL128 factor")
			f = 0.7
		}
		busBw = f32(math.Min(d()*f, fch*k.PerChMaxRingLL128Bws[cc][sc]))
	}
	if a == Tree && c == AllReduce {
		busBw = f32(math.Min(d()*0.92, fch*k.PerChMaxTreeBws[cc][sc]))
	}
	if a == Tree && p == LL {
		busBw = f32(math.Min(d()/3.8, llMaxBw))
	}
	if a == Tree && p == LL128 {
		ratio := 120.0 / 128.0
		if t.NNodes == 1 {
			ratio = 7.0 / 9.0
		}
		busBw = f32(math.Min(d()*ratio, fch*k.PerChMaxTreeLL128Bws[cc][sc]))
	}
	if a == Tree && t.MaxTreePattern == capabilities.PatternTree {
		busBw = f32(d() * 0.85)
	}
	if a == PAT {
		f := 0.75
		if ru.PAT == 1 { // 2.23 (reference §14 "PAT")
			f = 0.85
		}
		busBw = f32(d() * f)
	}
	if (a == CollNetDirect || a == CollNetChain) && p != Simple {
		return 0, fmt.Sprintf("%s is Simple only", a)
	}
	if a == CollNetDirect && p == Simple {
		if c == AllGather || c == ReduceScatter {
			busBw = f32(float64(ppn) * math.Min(float64(f32(g.BwIntra)), float64(f32(g.BwInter))*0.9))
		} else {
			// With a zero graph f is +Inf and this is Inf-Inf = NaN, as in NCCL; the forced disable
			// zeroes the cell and NaN never passes the argmin's t >= 0 test.
			f := ppn / float32(nCh)
			f -= (f - 1) / 2
			busBw /= f
			if t.MinCompCap >= 90 {
				busBw = f32(d() * 0.85)
			}
		}
	}
	if (a == NVLS || a == CollNetDirect) && p == Simple && (c == AllGather || c == ReduceScatter) && t.NNodes > 1 {
		switch {
		case c == AllGather && !t.CollNetPluginIAllGather:
			return 0, "multi-node AllGather needs the CollNet plugin's iallgather"
		case c == ReduceScatter && !t.CollNetPluginIReduceScatter:
			return 0, "multi-node ReduceScatter needs the CollNet plugin's ireducescatter"
		case !t.CollNetEnable:
			return 0, "multi-node AllGather/ReduceScatter needs CollNet (collnet_enable = false)"
		case t.MaxLocalRanks > t.CollNetHeadsNum:
			return 0, fmt.Sprintf("local ranks %d exceed CollNet heads %d", t.MaxLocalRanks, t.CollNetHeadsNum)
		}
	}
	skipRatio := a != Ring && (c == AllGather || c == ReduceScatter)
	if ru.NVLSGatherRatio { // <= 2.22: only CollNetDirect AllGather/ReduceScatter keep busBw
		skipRatio = a == CollNetDirect && (c == AllGather || c == ReduceScatter)
	}
	if !skipRatio {
		var ratio float32 = 0.5
		switch {
		case (a == NVLS || a == NVLSTree) && ru.NVLSBeforeEfficiency:
			ratio = f32(5.0 / 6.0) // 2.19-2.27 (reference §14 "NVLS model")
		case a == Ring || a == NVLS || a == NVLSTree:
			ratio = f32(float64(t.NRanks) / float64(nSteps(c, t.NRanks)))
		}
		busBw *= ratio
	}
	return busBw, ""
}

// latency is reference §3 for one modelled cell. The release's constants carry its latency
// deltas; the rules ru only change how 2.23 assigns PAT's (reference §14 "PAT").
func latency(t *capabilities.Topology, ru *Rules, k *Constants, c Coll, a Algo, p Proto, netOvh float64) float32 {
	g := t.Graphs.For(a)
	intraHw := HWPCI
	if g.TypeIntra == capabilities.PathNVL {
		intraHw = HWNVLink
	}
	hw := HWNet
	if t.NNodes == 1 {
		hw = intraHw
	}
	lat := f32(k.BaseLat[a][p])
	intraLat := f32(k.HWLat[intraHw][a][p])
	interLat := f32(k.HWLat[HWNet][a][p])
	if t.NRanks == t.NNodes && ru.InterLatPPN1Tree { // ppn == 1: Tree's NET latency for every algorithm (2.23+)
		interLat = f32(k.HWLat[HWNet][Tree][p])
	}
	interLat += f32(g.LatencyInter)
	if p == Simple {
		interLat += f32(g.LatencyInter) // the flush
	}
	ppnInt := t.NRanks / t.NNodes
	depth := float32(log2i(int64(t.NNodes)))
	nsteps := nSteps(c, t.NRanks)

	switch a {
	case Ring:
		if c == Broadcast || c == Reduce {
			if g.SameChannels {
				return f32(float64(lat) + k.HWLat[hw][Ring][p])
			}
			step := k.HWLat[hw][Ring][p]
			if p == Simple {
				step = k.HWLat[hw][Tree][Simple]
			}
			return f32(float64(lat) + float64(nsteps)*step)
		}
		ovh := netOvh
		if p == Simple {
			ovh *= 3
		}
		intraLat = max(intraLat, f32(ovh))
		nInter := 0
		if t.NNodes > 1 {
			nInter = t.NNodes - 1
			if c == AllReduce {
				nInter = 2 * (t.NNodes - 1)
				if ru.RingInterAllNodes { // <= 2.22: 2*nNodes
					nInter = 2 * t.NNodes
				}
			}
		}
		return lat + (float32(nsteps-nInter)*intraLat + float32(nInter)*interLat)
	case Tree:
		return lat + 2*(float32(ppnInt-1)*intraLat+depth*interLat)
	case CollNetDirect:
		return f32(float64(lat) + 2*(float64(min(1, ppnInt-1))*float64(intraLat)+float64(ppnInt-1)*0.4) + float64(interLat))
	case CollNetChain:
		return lat + (2*float32(ppnInt-1)*intraLat + interLat)
	case NVLS:
		if t.NNodes > 1 {
			return intraLat + interLat
		}
		return intraLat
	case NVLSTree:
		return lat + (intraLat + 2*depth*interLat)
	default: // PAT
		if ru.PAT < 3 { // 2.23-2.27 assign 8 + ..., whatever the base latency
			lat = 8
		}
		return f32(float64(lat) + float64(depth)*(float64(interLat)/3.5) + float64(t.NRanks)*2.8)
	}
}

// netOverhead is the multi-node ring's floor on the intra step latency (reference §3): 0 on one
// node; NCCL_NET_OVERHEAD (ns) * 0.001 when set; else 2.0 for x86 AMD and 1.0 otherwise.
func netOverhead(t *capabilities.Topology) (float64, error) {
	if t.NNodes == 1 {
		return 0, nil
	}
	if t.Env.NetOverhead.IsSet() {
		v, err := capabilities.EnvInt(t.Env.NetOverhead, "NCCL_NET_OVERHEAD", -2)
		if err != nil {
			return 0, err
		}
		if v != -2 {
			return float64(v) * .001, nil
		}
	}
	if t.CPUArch == capabilities.ArchX86 && t.CPUVendor == capabilities.VendorAMD {
		return 2.0, nil
	}
	return 1.0, nil
}

// log2i is floor(log2(x)) with log2i(x <= 0) = -1, as NCCL's log2i.
func log2i(x int64) int {
	if x <= 0 {
		return -1
	}
	n := -1
	for ; x > 0; x >>= 1 {
		n++
	}
	return n
}

// Log2i exposes log2i: floor(log2(x)), -1 for x <= 0.
func Log2i(x int64) int { return log2i(x) }

// setThreads is reference §4: maxThreads per cell and threadThresholds, with NCCL_NTHREADS,
// NCCL_LL128_NTHREADS and NCCL_THREAD_THRESHOLDS.
func (tb *Table) setThreads(t *capabilities.Topology) error {
	nt, err := capabilities.EnvInt(t.Env.NThreads, "NCCL_NTHREADS", -2)
	if err != nil {
		return err
	}
	nt128, err := capabilities.EnvInt(t.Env.LL128NThreads, "NCCL_LL128_NTHREADS", -2)
	if err != nil {
		return err
	}
	ringSimpleDef := 512
	if float64(f32(t.Graphs.Ring.BwIntra))*float64(t.Graphs.Ring.NChannels) <= 12.0 { // PCI_BW
		ringSimpleDef = 256
	}
	m := &tb.MaxThreads
	m[Ring][Simple] = nThreads(nt, 64, 512, ringSimpleDef)
	m[Tree][Simple] = nThreads(nt, 64, 512, 512)
	m[Ring][LL] = nThreads(nt, 64, 512, 512)
	m[Tree][LL] = m[Ring][LL]
	m[Ring][LL128] = nThreads(nt128, 160, 640, 640)
	m[Tree][LL128] = m[Ring][LL128]
	for _, a := range []Algo{CollNetDirect, CollNetChain, NVLS, NVLSTree} {
		m[a][Simple] = 640
	}
	th := &tb.ThreadThresholds
	for a := range th {
		th[a] = [NumProtos]int{8, 8, 64}
	}
	th[Ring][LL] *= t.NRanks
	th[CollNetDirect][Simple] = 512
	th[CollNetChain][Simple] = 512
	if s := t.Env.ThreadThresholds; s.IsSet() {
		fields := strings.Fields(s.Value)
		if len(fields) > 6 {
			return fmt.Errorf("NCCL_THREAD_THRESHOLDS=%q (%s): at most 6 values", s.Value, s.Source)
		}
		for i, f := range fields {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return fmt.Errorf("NCCL_THREAD_THRESHOLDS=%q (%s): %q is not an integer", s.Value, s.Source, f)
			}
			if v >= 0 {
				th[Algo(i/3)][Proto(i%3)] = int(v)
			}
		}
	}
	return nil
}

// nThreads is NCCL's getNthreads: env <= 0 gives def; not a multiple of 32 gives max; otherwise
// clamped to [lo, hi].
func nThreads(env, lo, hi, def int) int {
	switch {
	case env <= 0:
		return def
	case env%32 != 0:
		return hi
	case env > hi:
		return hi
	case env < lo:
		return lo
	}
	return env
}
