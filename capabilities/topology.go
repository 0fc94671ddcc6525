package capabilities

import (
	"errors"
	"fmt"
	"math"
)

// Graph is one topology-search result (NCCL's ncclTopoGraph as the tuner reads it). An absent
// graph is all zeros, as NCCL leaves unsearched graphs (typeIntra LOC, 0 channels).
type Graph struct {
	NChannels    int      // search channels, before duplication
	BwIntra      float64  // GB/s per channel inside a node
	BwInter      float64  // GB/s per channel across nodes
	TypeIntra    PathType // worst path type inside a node
	TypeInter    PathType // worst path type across nodes
	LatencyInter float64  // net plugin latency, us
	SameChannels bool
}

// Graphs holds the five searched graphs. NVLSTree reads NVLS and PAT reads Tree
// (reference/nccl-costmodel.md addendum 1).
type Graphs struct {
	Tree, Ring, CollNetDirect, CollNetChain, NVLS Graph
}

// For returns the graph algorithm a is modelled on: {tree, ring, collnetDirect, collnetChain, nvls,
// nvls, tree} as init.cc passes them.
func (g *Graphs) For(a Algo) *Graph {
	switch a {
	case Tree, PAT:
		return &g.Tree
	case Ring:
		return &g.Ring
	case CollNetDirect:
		return &g.CollNetDirect
	case CollNetChain:
		return &g.CollNetChain
	default:
		return &g.NVLS
	}
}

// OpDtype is one (op, dtype) pair the CollNet plugin can reduce.
type OpDtype struct {
	Op    Op
	Dtype Dtype
}

// Source says who set an env variable.
type Source string

// Sources of an env setting, strongest first.
const (
	SourceUnset    Source = ""
	SourceFlag     Source = "flag"     // --algo / --proto on the command line
	SourceTopology Source = "topology" // the topology file's [env] table
	SourceProcess  Source = "process"  // the process environment
)

// Setting is one env variable's value and where it came from.
type Setting struct {
	Value  string
	Source Source
}

// IsSet reports whether the variable was given at all.
func (s Setting) IsSet() bool { return s.Source != SourceUnset }

// Env holds the NCCL tuning variables the model reads.
type Env struct {
	Algo             Setting // NCCL_ALGO
	Proto            Setting // NCCL_PROTO
	NThreads         Setting // NCCL_NTHREADS
	LL128NThreads    Setting // NCCL_LL128_NTHREADS
	NetOverhead      Setting // NCCL_NET_OVERHEAD (ns)
	PATEnable        Setting // NCCL_PAT_ENABLE
	LL128C2C         Setting // NCCL_LL128_C2C
	ThreadThresholds Setting // NCCL_THREAD_THRESHOLDS
}

// EnvVars lists the names Env understands, in field order.
var EnvVars = []string{"NCCL_ALGO", "NCCL_PROTO", "NCCL_NTHREADS", "NCCL_LL128_NTHREADS",
	"NCCL_NET_OVERHEAD", "NCCL_PAT_ENABLE", "NCCL_LL128_C2C", "NCCL_THREAD_THRESHOLDS"}

// Var returns a pointer to the setting named by an NCCL variable name, or nil if unknown.
func (e *Env) Var(name string) *Setting {
	switch name {
	case "NCCL_ALGO":
		return &e.Algo
	case "NCCL_PROTO":
		return &e.Proto
	case "NCCL_NTHREADS":
		return &e.NThreads
	case "NCCL_LL128_NTHREADS":
		return &e.LL128NThreads
	case "NCCL_NET_OVERHEAD":
		return &e.NetOverhead
	case "NCCL_PAT_ENABLE":
		return &e.PATEnable
	case "NCCL_LL128_C2C":
		return &e.LL128C2C
	case "NCCL_THREAD_THRESHOLDS":
		return &e.ThreadThresholds
	}
	return nil
}

// Overlay sets every variable of e that is unset from lower, keeping e's stronger settings.
func (e *Env) Overlay(lower Env) {
	for _, name := range EnvVars {
		if s := e.Var(name); !s.IsSet() {
			*s = *lower.Var(name)
		}
	}
}

// Topology holds every input of the cost model for one communicator
// (reference/nccl-costmodel.md §0.1; field names follow the topology file's keys).
type Topology struct {
	NNodes, NRanks              int
	MinCompCap, MaxCompCap      int // e.g. 90 for sm_90
	CPUArch                     CPUArch
	CPUVendor                   CPUVendor
	NVSCount                    int // NVSwitches seen; 0 disables CollNetDirect
	CollNetEnable               bool
	CollNetChainSupport         bool
	CollNetHeadsNum             int
	CollNetDirectNHeads         int
	CollNetPluginIAllGather     bool
	CollNetPluginIReduceScatter bool
	CollNetSupport              []OpDtype // what the CollNet plugin reduces
	NVLSSupport                 bool
	MaxTreePattern              int // 1 balanced, 2 split, 3 tree
	NetDeviceType               NetDeviceType
	CommNChannels               int // comm->nChannels (about 2x the search channels)
	NVLSChannels                int
	MaxLocalRanks               int
	LocalRanks                  int // ranks on this rank's node; defaults to MaxLocalRanks
	CUDARTVersion               int // e.g. 12080
	Env                         Env
	Graphs                      Graphs
	// Emulated is what collplan's CPU engine emulates on this node (a node table's [emulation]);
	// the zero value, real hardware, for every topology file and GPU table.
	Emulated Emulation
}

// Emulation is the part of a Topology that an emulated node's [emulation] table sets (tables.Emulation
// says what each key means). FromNode folds multicast_switch into NVLSSupport and reducing_network
// into CollNetEnable, so NCCL's rules read them unchanged; what stays here is what those flags
// cannot say.
type Emulation struct {
	// MulticastSwitch: an emulated NVSwitch with multicast. It is the NVSwitch CollNetDirect needs
	// (nvs_count stays the host's 0).
	MulticastSwitch bool
	// NVLSEfficiency, when > 0, replaces tuning.cc's nvlsEfficiency[compCapIndex] in NVLS's and
	// NVLS_TREE's bandwidth (costmodel).
	NVLSEfficiency float64
	// ReducingNetwork: an emulated reducing network (CollNet's aggregation endpoint).
	ReducingNetwork bool
}

// PPN returns ranks per node as NCCL's float ppn = nRanks/nNodes.
func (t *Topology) PPN() float64 { return float64(t.NRanks) / float64(t.NNodes) }

// CompCapIndex is reference §0's compCapIndex: >=100 -> 3, >=90 -> 2, >=80 -> 1, else 0.
func (t *Topology) CompCapIndex() int {
	switch {
	case t.MinCompCap >= 100:
		return 3
	case t.MinCompCap >= 90:
		return 2
	case t.MinCompCap >= 80:
		return 1
	}
	return 0
}

// ScaleIndex is reference §0's index2: nNodes <= 2 ? nNodes-1 : 2.
func (t *Topology) ScaleIndex() int {
	if t.NNodes <= 2 {
		return t.NNodes - 1
	}
	return 2
}

// Validate checks the relations between fields that decoding cannot see. Errors name the field.
func (t *Topology) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if t.NNodes < 1 {
		bad("n_nodes", "must be at least 1, got %d", t.NNodes)
	}
	if t.NRanks < 1 {
		bad("n_ranks", "must be at least 1, got %d", t.NRanks)
	}
	if t.NNodes >= 1 && t.NRanks < t.NNodes {
		bad("n_ranks", "%d is less than n_nodes %d", t.NRanks, t.NNodes)
	}
	if t.MinCompCap < 0 || t.MaxCompCap < t.MinCompCap {
		bad("max_comp_cap", "%d must be >= min_comp_cap %d >= 0", t.MaxCompCap, t.MinCompCap)
	}
	if t.MaxTreePattern < 1 || t.MaxTreePattern > 3 {
		bad("max_tree_pattern", "must be 1..3, got %d", t.MaxTreePattern)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"nvs_count", t.NVSCount}, {"collnet_heads_num", t.CollNetHeadsNum},
		{"collnet_direct_n_heads", t.CollNetDirectNHeads}, {"comm_n_channels", t.CommNChannels},
		{"nvls_channels", t.NVLSChannels}, {"max_local_ranks", t.MaxLocalRanks},
		{"local_ranks", t.LocalRanks}, {"cudart_version", t.CUDARTVersion}} {
		if f.v < 0 {
			bad(f.name, "must not be negative, got %d", f.v)
		}
	}
	if e := t.Emulated.NVLSEfficiency; e != 0 && !(e > 0 && e <= 1) {
		bad("emulated.nvls_efficiency", "must be 0 < e <= 1 (or 0: NCCL's per-architecture value), got %v", e)
	}
	if t.LocalRanks > t.MaxLocalRanks {
		bad("local_ranks", "%d exceeds max_local_ranks %d", t.LocalRanks, t.MaxLocalRanks)
	}
	if t.CommNChannels > 64 {
		bad("comm_n_channels", "NCCL allows at most 64 channels, got %d", t.CommNChannels)
	}
	for _, g := range []struct {
		name string
		g    *Graph
	}{{"graphs.tree", &t.Graphs.Tree}, {"graphs.ring", &t.Graphs.Ring},
		{"graphs.collnet_direct", &t.Graphs.CollNetDirect}, {"graphs.collnet_chain", &t.Graphs.CollNetChain},
		{"graphs.nvls", &t.Graphs.NVLS}} {
		if g.g.NChannels < 0 || g.g.NChannels > 64 {
			bad(g.name+".n_channels", "must be 0..64, got %d", g.g.NChannels)
		}
		if !finiteNonNeg(g.g.BwIntra) || !finiteNonNeg(g.g.BwInter) || !finiteNonNeg(g.g.LatencyInter) {
			bad(g.name, "bw_intra, bw_inter and latency_inter must be finite and >= 0")
		}
	}
	return errors.Join(errs...)
}

func finiteNonNeg(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }
