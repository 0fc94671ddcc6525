package plugin

import (
	"fmt"
	"math"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	pb "github.com/collplan/collplan/plugin/proto"
)

// This file is the only place where domain values and wire messages meet. Decoders check what
// they decode: a plugin's reply is untrusted input.

// Limits on a reply, far above any sane policy and far below what would hurt the host.
const (
	maxIntervals = 1 << 16
	maxEdits     = 1 << 10
	maxCostUS    = 1e9     // |AddCost| and ScaleCost bound
	maxChunk     = 1 << 40 // planner's bound on a chunk edit
	maxChannels  = 64      // NCCL's MAXCHANNELS
)

func topologyToProto(t *capabilities.Topology) *pb.Topology {
	out := &pb.Topology{
		NNodes: int64(t.NNodes), NRanks: int64(t.NRanks),
		MinCompCap: int64(t.MinCompCap), MaxCompCap: int64(t.MaxCompCap),
		CpuArch: int64(t.CPUArch), CpuVendor: int64(t.CPUVendor), NvsCount: int64(t.NVSCount),
		CollnetEnable: t.CollNetEnable, CollnetChainSupport: t.CollNetChainSupport,
		CollnetHeadsNum: int64(t.CollNetHeadsNum), CollnetDirectNHeads: int64(t.CollNetDirectNHeads),
		CollnetPluginIallgather:     t.CollNetPluginIAllGather,
		CollnetPluginIreducescatter: t.CollNetPluginIReduceScatter,
		NvlsSupport:                 t.NVLSSupport, MaxTreePattern: int64(t.MaxTreePattern),
		NetDeviceType: int64(t.NetDeviceType), CommNChannels: int64(t.CommNChannels),
		NvlsChannels: int64(t.NVLSChannels), MaxLocalRanks: int64(t.MaxLocalRanks),
		LocalRanks: int64(t.LocalRanks), CudartVersion: int64(t.CUDARTVersion),
		Env: &pb.Env{
			Algo: settingToProto(t.Env.Algo), Proto: settingToProto(t.Env.Proto),
			Nthreads: settingToProto(t.Env.NThreads), Ll128Nthreads: settingToProto(t.Env.LL128NThreads),
			NetOverhead: settingToProto(t.Env.NetOverhead), PatEnable: settingToProto(t.Env.PATEnable),
			Ll128C2C: settingToProto(t.Env.LL128C2C), ThreadThresholds: settingToProto(t.Env.ThreadThresholds),
		},
		Tree: graphToProto(&t.Graphs.Tree), Ring: graphToProto(&t.Graphs.Ring),
		CollnetDirect: graphToProto(&t.Graphs.CollNetDirect), CollnetChain: graphToProto(&t.Graphs.CollNetChain),
		Nvls: graphToProto(&t.Graphs.NVLS),
	}
	if e := t.Emulated; e != (capabilities.Emulation{}) {
		out.Emulation = &pb.Emulation{MulticastSwitch: e.MulticastSwitch, NvlsEfficiency: e.NVLSEfficiency,
			ReducingNetwork: e.ReducingNetwork}
	}
	for _, s := range t.CollNetSupport {
		out.CollnetSupport = append(out.CollnetSupport, &pb.OpDtype{Op: int64(s.Op), Dtype: int64(s.Dtype)})
	}
	return out
}

func settingToProto(s capabilities.Setting) *pb.Setting {
	return &pb.Setting{Value: s.Value, Source: string(s.Source)}
}

func settingFromProto(s *pb.Setting) capabilities.Setting {
	return capabilities.Setting{Value: s.GetValue(), Source: capabilities.Source(s.GetSource())}
}

func graphToProto(g *capabilities.Graph) *pb.Graph {
	return &pb.Graph{NChannels: int64(g.NChannels), BwIntra: g.BwIntra, BwInter: g.BwInter,
		TypeIntra: int64(g.TypeIntra), TypeInter: int64(g.TypeInter), LatencyInter: g.LatencyInter,
		SameChannels: g.SameChannels}
}

func graphFromProto(g *pb.Graph) capabilities.Graph {
	return capabilities.Graph{NChannels: int(g.GetNChannels()), BwIntra: g.GetBwIntra(), BwInter: g.GetBwInter(),
		TypeIntra: capabilities.PathType(g.GetTypeIntra()), TypeInter: capabilities.PathType(g.GetTypeInter()),
		LatencyInter: g.GetLatencyInter(), SameChannels: g.GetSameChannels()}
}

// topologyFromProto decodes a topology and checks it as the topology loader does.
func topologyFromProto(p *pb.Topology) (capabilities.Topology, error) {
	if p == nil {
		return capabilities.Topology{}, fmt.Errorf("no topology")
	}
	e := p.GetEnv()
	t := capabilities.Topology{
		NNodes: int(p.NNodes), NRanks: int(p.NRanks), MinCompCap: int(p.MinCompCap), MaxCompCap: int(p.MaxCompCap),
		CPUArch: capabilities.CPUArch(p.CpuArch), CPUVendor: capabilities.CPUVendor(p.CpuVendor),
		NVSCount: int(p.NvsCount), CollNetEnable: p.CollnetEnable, CollNetChainSupport: p.CollnetChainSupport,
		CollNetHeadsNum: int(p.CollnetHeadsNum), CollNetDirectNHeads: int(p.CollnetDirectNHeads),
		CollNetPluginIAllGather: p.CollnetPluginIallgather, CollNetPluginIReduceScatter: p.CollnetPluginIreducescatter,
		NVLSSupport: p.NvlsSupport, MaxTreePattern: int(p.MaxTreePattern),
		NetDeviceType: capabilities.NetDeviceType(p.NetDeviceType), CommNChannels: int(p.CommNChannels),
		NVLSChannels: int(p.NvlsChannels), MaxLocalRanks: int(p.MaxLocalRanks), LocalRanks: int(p.LocalRanks),
		CUDARTVersion: int(p.CudartVersion),
		Env: capabilities.Env{
			Algo: settingFromProto(e.GetAlgo()), Proto: settingFromProto(e.GetProto()),
			NThreads: settingFromProto(e.GetNthreads()), LL128NThreads: settingFromProto(e.GetLl128Nthreads()),
			NetOverhead: settingFromProto(e.GetNetOverhead()), PATEnable: settingFromProto(e.GetPatEnable()),
			LL128C2C: settingFromProto(e.GetLl128C2C()), ThreadThresholds: settingFromProto(e.GetThreadThresholds()),
		},
		Graphs: capabilities.Graphs{
			Tree: graphFromProto(p.Tree), Ring: graphFromProto(p.Ring),
			CollNetDirect: graphFromProto(p.CollnetDirect), CollNetChain: graphFromProto(p.CollnetChain),
			NVLS: graphFromProto(p.Nvls),
		},
		Emulated: capabilities.Emulation{MulticastSwitch: p.GetEmulation().GetMulticastSwitch(),
			NVLSEfficiency: p.GetEmulation().GetNvlsEfficiency(), ReducingNetwork: p.GetEmulation().GetReducingNetwork()},
	}
	for _, s := range p.CollnetSupport {
		t.CollNetSupport = append(t.CollNetSupport, capabilities.OpDtype{Op: capabilities.Op(s.GetOp()), Dtype: capabilities.Dtype(s.GetDtype())})
	}
	if err := t.Validate(); err != nil {
		return t, fmt.Errorf("topology: %w", err)
	}
	return t, nil
}

func classToProto(c planner.Class) *pb.Class {
	return &pb.Class{Coll: int32(c.Coll), Op: int32(c.Op), Dtype: int32(c.Dtype), PipeOps: int64(c.PipeOps), RegBuff: c.RegBuff}
}

func classFromProto(p *pb.Class) (planner.Class, error) {
	if p == nil {
		return planner.Class{}, fmt.Errorf("no class")
	}
	c := planner.Class{Coll: costmodel.Coll(p.Coll), Op: capabilities.Op(p.Op), Dtype: capabilities.Dtype(p.Dtype),
		PipeOps: int(p.PipeOps), RegBuff: p.RegBuff}
	switch {
	case c.Coll < 0 || c.Coll >= costmodel.NumColls:
		return c, fmt.Errorf("class: unknown collective %d", p.Coll)
	case c.Op < 0 || c.Op >= capabilities.NumOps:
		return c, fmt.Errorf("class: unknown op %d", p.Op)
	case c.Dtype < 0 || c.Dtype >= capabilities.NumDtypes:
		return c, fmt.Errorf("class: unknown dtype %d", p.Dtype)
	case p.PipeOps < 1 || p.PipeOps > math.MaxInt32:
		return c, fmt.Errorf("class: pipe ops %d out of range", p.PipeOps)
	}
	return c, nil
}

// constantsToProto flattens the constants row-major, as ncclTunerConstants_v5_t lays them out.
func constantsToProto(k *costmodel.Constants) *pb.Constants {
	out := &pb.Constants{}
	for a := range k.BaseLat {
		out.BaseLat = append(out.BaseLat, k.BaseLat[a][:]...)
	}
	for h := range k.HWLat {
		for a := range k.HWLat[h] {
			out.HwLat = append(out.HwLat, k.HWLat[h][a][:]...)
		}
	}
	flat := func(m *[4][3]float64) []float64 {
		var s []float64
		for i := range m {
			s = append(s, m[i][:]...)
		}
		return s
	}
	out.LlMaxBws = flat(&k.LLMaxBws)
	out.PerChMaxRingLl128Bws = flat(&k.PerChMaxRingLL128Bws)
	out.PerChMaxTreeLl128Bws = flat(&k.PerChMaxTreeLL128Bws)
	out.PerChMaxTreeBws = flat(&k.PerChMaxTreeBws)
	out.PerChMaxNvlsTreeBws = flat(&k.PerChMaxNVLSTreeBws)
	return out
}

// constantsFromProto decodes constants; every array must have its exact length and every value must
// be finite and >= 0.
func constantsFromProto(p *pb.Constants) (costmodel.Constants, error) {
	var k costmodel.Constants
	type field struct {
		name string
		src  []float64
		dst  []*float64
	}
	base := field{name: "base_lat", src: p.GetBaseLat()}
	for a := range k.BaseLat {
		for q := range k.BaseLat[a] {
			base.dst = append(base.dst, &k.BaseLat[a][q])
		}
	}
	hw := field{name: "hw_lat", src: p.GetHwLat()}
	for h := range k.HWLat {
		for a := range k.HWLat[h] {
			for q := range k.HWLat[h][a] {
				hw.dst = append(hw.dst, &k.HWLat[h][a][q])
			}
		}
	}
	ceiling := func(name string, src []float64, m *[4][3]float64) field {
		f := field{name: name, src: src}
		for i := range m {
			for j := range m[i] {
				f.dst = append(f.dst, &m[i][j])
			}
		}
		return f
	}
	for _, f := range []field{base, hw,
		ceiling("ll_max_bws", p.GetLlMaxBws(), &k.LLMaxBws),
		ceiling("per_ch_max_ring_ll128_bws", p.GetPerChMaxRingLl128Bws(), &k.PerChMaxRingLL128Bws),
		ceiling("per_ch_max_tree_ll128_bws", p.GetPerChMaxTreeLl128Bws(), &k.PerChMaxTreeLL128Bws),
		ceiling("per_ch_max_tree_bws", p.GetPerChMaxTreeBws(), &k.PerChMaxTreeBws),
		ceiling("per_ch_max_nvls_tree_bws", p.GetPerChMaxNvlsTreeBws(), &k.PerChMaxNVLSTreeBws)} {
		if len(f.src) != len(f.dst) {
			return k, fmt.Errorf("constants: %s has %d values, want %d", f.name, len(f.src), len(f.dst))
		}
		for i, v := range f.src {
			if !(v >= 0) || math.IsInf(v, 0) {
				return k, fmt.Errorf("constants: %s[%d] = %v, want finite and >= 0", f.name, i, v)
			}
			*f.dst[i] = v
		}
	}
	return k, nil
}

// factorsToProto lists every corrected cell with its effective factor per bucket.
func factorsToProto(f *correction.Factors) []*pb.CellFactors {
	var out []*pb.CellFactors
	for c := costmodel.Coll(0); c < costmodel.NumColls; c++ {
		for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
			for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
				src := f.Source(c, a, p)
				if src == correction.SourceNone {
					continue
				}
				cf := &pb.CellFactors{Coll: int32(c), Algo: int32(a), Proto: int32(p), Source: string(src)}
				for i := 0; i < correction.NumBuckets; i++ {
					cf.Factors = append(cf.Factors, float64(f.Factor(c, a, p, correction.BucketStart(i))))
				}
				out = append(out, cf)
			}
		}
	}
	return out
}

// factorsFromProto builds factors from cells; correction.Set checks each value.
func factorsFromProto(cells []*pb.CellFactors) (*correction.Factors, error) {
	f := &correction.Factors{}
	for i, cf := range cells {
		c, a, p := costmodel.Coll(cf.GetColl()), costmodel.Algo(cf.GetAlgo()), costmodel.Proto(cf.GetProto())
		if c < 0 || c >= costmodel.NumColls || a < 0 || a >= costmodel.NumAlgos || p < 0 || p >= costmodel.NumProtos {
			return nil, fmt.Errorf("corrections[%d]: cell (%d, %d, %d) out of range", i, cf.GetColl(), cf.GetAlgo(), cf.GetProto())
		}
		src := correction.Source(cf.GetSource())
		if src == correction.SourceNone {
			src = correction.SourceTable
		}
		if err := f.Set(c, a, p, cf.GetFactors(), src); err != nil {
			return nil, fmt.Errorf("corrections[%d]: %w", i, err)
		}
	}
	return f, nil
}

func modelToProto(m Model) *pb.Model {
	out := &pb.Model{}
	if m.Constants != nil {
		out.Constants = constantsToProto(m.Constants)
	}
	if m.Factors != nil {
		out.Corrections = factorsToProto(m.Factors)
	}
	return out
}

// menuToProto lists the menu's cells, algorithms outer, with the class's factors per bucket.
func menuToProto(m *planner.Menu) []*pb.MenuCell {
	out := make([]*pb.MenuCell, 0, costmodel.NumAlgos*costmodel.NumProtos)
	for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
		for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
			c := &m.Cells[a][p]
			mc := &pb.MenuCell{Algo: int32(a), Proto: int32(p), LatUs: c.LatUS, BwGbps: c.BWGBps, Reason: c.Reason,
				CorrectionSource: string(c.CorrectionSource), Factors: make([]float32, correction.NumBuckets), Fitted: c.Fitted}
			for i := range mc.Factors {
				mc.Factors[i] = m.Factor(a, p, correction.BucketStart(i))
			}
			out = append(out, mc)
		}
	}
	return out
}

// menuFactors turns the wire menu's factors into correction factors for the class's collective.
func menuFactors(coll costmodel.Coll, cells []*pb.MenuCell) (*correction.Factors, error) {
	f := &correction.Factors{}
	for _, mc := range cells {
		if mc.GetCorrectionSource() == "" {
			continue
		}
		a, p := costmodel.Algo(mc.GetAlgo()), costmodel.Proto(mc.GetProto())
		if a < 0 || a >= costmodel.NumAlgos || p < 0 || p >= costmodel.NumProtos {
			return nil, fmt.Errorf("menu: cell (%d, %d) out of range", mc.GetAlgo(), mc.GetProto())
		}
		fs := make([]float64, len(mc.GetFactors()))
		for i, v := range mc.GetFactors() {
			fs[i] = float64(v)
		}
		if err := f.Set(coll, a, p, fs, correction.Source(mc.GetCorrectionSource())); err != nil {
			return nil, fmt.Errorf("menu: %w", err)
		}
	}
	return f, nil
}

// menuFitted returns the wire menu's fitted cells (the host priced them from measurements, not
// the model) as overrides for the class's collective, so that the plugin prices them alike.
func menuFitted(coll costmodel.Coll, cells []*pb.MenuCell) []planner.CellOverride {
	var out []planner.CellOverride
	for _, mc := range cells {
		if mc.GetFitted() {
			out = append(out, planner.CellOverride{Coll: coll, Algo: costmodel.Algo(mc.GetAlgo()), Proto: costmodel.Proto(mc.GetProto()),
				LatUS: mc.GetLatUs(), BWGBps: mc.GetBwGbps()})
		}
	}
	return out
}

// sameMenu checks that a menu priced again on the plugin side is the host's: same latency,
// bandwidth, legality and factors in every cell.
func sameMenu(m *planner.Menu, cells []*pb.MenuCell) error {
	if len(cells) != costmodel.NumAlgos*costmodel.NumProtos {
		return fmt.Errorf("menu has %d cells, want %d", len(cells), costmodel.NumAlgos*costmodel.NumProtos)
	}
	for _, mc := range cells {
		a, p := costmodel.Algo(mc.GetAlgo()), costmodel.Proto(mc.GetProto())
		if a < 0 || a >= costmodel.NumAlgos || p < 0 || p >= costmodel.NumProtos {
			return fmt.Errorf("menu: cell (%d, %d) out of range", mc.GetAlgo(), mc.GetProto())
		}
		c := &m.Cells[a][p]
		cell := planner.Cell{Algo: a, Proto: p}
		switch {
		case c.LatUS != mc.GetLatUs() || c.BWGBps != mc.GetBwGbps():
			return fmt.Errorf("menu: %s priced %g us, %g GB/s here but %g us, %g GB/s by the host (different model versions?)",
				cell, c.LatUS, c.BWGBps, mc.GetLatUs(), mc.GetBwGbps())
		case (c.Reason == "") != (mc.GetReason() == ""):
			return fmt.Errorf("menu: %s legality differs: here %q, host %q", cell, c.Reason, mc.GetReason())
		}
		for i, v := range mc.GetFactors() {
			if got := m.Factor(a, p, correction.BucketStart(i)); got != v {
				return fmt.Errorf("menu: %s correction bucket %d is %g here, %g on the host", cell, i, got, v)
			}
		}
	}
	return nil
}

var editKinds = map[planner.EditKind]pb.EditKind{
	planner.Force: pb.EditKind_EDIT_KIND_FORCE, planner.Disable: pb.EditKind_EDIT_KIND_DISABLE,
	planner.AddCost: pb.EditKind_EDIT_KIND_ADD_COST, planner.ScaleCost: pb.EditKind_EDIT_KIND_SCALE_COST,
	planner.Channels: pb.EditKind_EDIT_KIND_CHANNELS, planner.Chunk: pb.EditKind_EDIT_KIND_CHUNK,
}

func intervalsToProto(ivs []planner.Interval) ([]*pb.Interval, error) {
	out := make([]*pb.Interval, 0, len(ivs))
	for i, iv := range ivs {
		pi := &pb.Interval{Lo: iv.Lo, Hi: iv.Hi}
		for j, e := range iv.Edits {
			k, ok := editKinds[e.Kind]
			if !ok {
				return nil, fmt.Errorf("interval %d edit %d: unknown edit kind %d", i, j, int(e.Kind))
			}
			pe := &pb.Edit{Kind: k, Value: e.Value}
			if e.Kind != planner.Channels && e.Kind != planner.Chunk {
				pe.Algo, pe.Proto = int32(e.Cell.Algo), int32(e.Cell.Proto)
			}
			pi.Edits = append(pi.Edits, pe)
		}
		out = append(out, pi)
	}
	return out, nil
}

// intervalsFromProto decodes and checks a reply: known kinds, cells in range, finite values in
// range (no NaN, no negative channels, chunks or scales), sorted non-overlapping non-empty intervals.
// Whether an edit touches a cell that is not legal is the planner's check.
func intervalsFromProto(ps []*pb.Interval) ([]planner.Interval, error) {
	if len(ps) > maxIntervals {
		return nil, fmt.Errorf("%d intervals, at most %d", len(ps), maxIntervals)
	}
	out := make([]planner.Interval, 0, len(ps))
	prev := int64(0)
	for i, pi := range ps {
		if pi.GetLo() < prev || pi.GetHi() <= pi.GetLo() {
			return nil, fmt.Errorf("interval %d [%d, %d): empty, negative or overlapping the previous one", i, pi.GetLo(), pi.GetHi())
		}
		prev = pi.GetHi()
		if len(pi.GetEdits()) > maxEdits {
			return nil, fmt.Errorf("interval %d: %d edits, at most %d", i, len(pi.GetEdits()), maxEdits)
		}
		iv := planner.Interval{Lo: pi.GetLo(), Hi: pi.GetHi(), Edits: make([]planner.Edit, 0, len(pi.GetEdits()))}
		for j, pe := range pi.GetEdits() {
			e, err := editFromProto(pe)
			if err != nil {
				return nil, fmt.Errorf("interval %d [%d, %d) edit %d: %w", i, pi.GetLo(), pi.GetHi(), j, err)
			}
			iv.Edits = append(iv.Edits, e)
		}
		out = append(out, iv)
	}
	return out, nil
}

func editFromProto(pe *pb.Edit) (planner.Edit, error) {
	var e planner.Edit
	found := false
	for k, w := range editKinds {
		if w == pe.GetKind() {
			e.Kind, found = k, true
		}
	}
	if !found {
		return e, fmt.Errorf("unknown edit kind %d", int32(pe.GetKind()))
	}
	v := pe.GetValue()
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return e, fmt.Errorf("%s: value %v is not finite", e.Kind, v)
	}
	e.Value = v
	switch e.Kind {
	case planner.Channels:
		if v < 0 || v > maxChannels || v != math.Trunc(v) {
			return e, fmt.Errorf("channels %v: want an integer in [0, %d]", v, maxChannels)
		}
		return e, nil
	case planner.Chunk:
		if v < 0 || v > maxChunk || v != math.Trunc(v) {
			return e, fmt.Errorf("chunk %v: want a byte count in [0, %d]", v, int64(maxChunk))
		}
		return e, nil
	case planner.AddCost:
		if math.Abs(v) > maxCostUS {
			return e, fmt.Errorf("add %v us: out of range [-%g, %g]", v, maxCostUS, maxCostUS)
		}
	case planner.ScaleCost:
		if v < 0 || v > maxCostUS {
			return e, fmt.Errorf("scale %v: want a factor in [0, %g]", v, maxCostUS)
		}
	}
	a, p := costmodel.Algo(pe.GetAlgo()), costmodel.Proto(pe.GetProto())
	if a < 0 || a >= costmodel.NumAlgos || p < 0 || p >= costmodel.NumProtos {
		return e, fmt.Errorf("%s: cell (%d, %d) out of range", e.Kind, pe.GetAlgo(), pe.GetProto())
	}
	e.Cell = planner.Cell{Algo: a, Proto: p}
	return e, nil
}

// leavesACell checks that no interval disables every cell the menu allows: such an answer would
// leave the planner without a plan, so it is refused like any invalid reply.
func leavesACell(ivs []planner.Interval, m *planner.Menu) error {
	for i, iv := range ivs {
		var off [costmodel.NumAlgos][costmodel.NumProtos]bool
		for _, e := range iv.Edits {
			if e.Kind == planner.Disable {
				off[e.Cell.Algo][e.Cell.Proto] = true
			}
		}
		ok := false
		for a := costmodel.Algo(0); a < costmodel.NumAlgos && !ok; a++ {
			for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
				if m.Cells[a][p].Reason == "" && !off[a][p] {
					ok = true
					break
				}
			}
		}
		if !ok {
			return fmt.Errorf("interval %d [%d, %d) disables every legal cell", i, iv.Lo, iv.Hi)
		}
	}
	return nil
}
