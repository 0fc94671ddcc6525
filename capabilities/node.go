package capabilities

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/collplan/collplan/tables"
)

// FromNode builds the Topology of nNodes nodes of the kind a node table describes and validates it.
//
//   - n_ranks = nNodes * gpus_per_node; max_local_ranks = local_ranks = gpus_per_node;
//     min_comp_cap = max_comp_cap = compute_capability.
//   - comm_n_channels, nvls_channels and the graphs come from [scale.N], N being NCCL's index2 scale:
//     "1" for one node, "2" for two, "4" for three or more. An absent graph is all zeros, and inside
//     a present graph an empty type_intra or type_inter means LOC, as in a topology file.
//   - The CPU, NVSwitch, NVLS and CollNet fields come from [node] unchanged (collnet_enable and
//     nvls_support are not cleared for one node or empty graphs: the table is trusted).
//   - An emulated node's [emulation] (tables.Emulation) is copied to Emulated, and turns on what
//     it emulates: multicast_switch sets NVLSSupport, reducing_network sets CollNetEnable and CollNetChainSupport. The
//     compute capability and the other [node] facts stay the table's.
//     net_device_type "" means host, cudart_version 0 means 12080, max_tree_pattern 0 means 1.
//   - With a fabric composed in (tables.WithFabric, n.Fabric), net_device_type is the fabric's
//     for nNodes > 1; the graphs already carry its inter-node values.
//   - Env is left unset.
//
// Errors start with "capabilities: FILE: " (n.File, else n.Name+".toml") and name the table key, e.g.
// "capabilities: h100.toml: node.cpu_arch: unknown cpu_arch ...".
func FromNode(n *tables.Node, nNodes int) (Topology, error) {
	if n == nil {
		return Topology{}, fmt.Errorf("capabilities: FromNode: nil node table")
	}
	file := n.File
	if file == "" && n.Name != "" {
		file = n.Name + ".toml"
	} else if file == "" {
		file = "node table"
	}
	t, err := fromNode(n, nNodes)
	if err == nil {
		err = t.Validate()
	}
	if err != nil {
		return Topology{}, fmt.Errorf("capabilities: %s: %w", file, err)
	}
	return t, nil
}

// FromNodeShape is FromNode with rpn ranks per node instead of the table's gpus_per_node (rpn 0:
// the table's): n_ranks = nNodes * rpn, max_local_ranks = local_ranks = rpn, the other fields as
// FromNode gives them. The graphs stay the table's (measured or estimated at gpus_per_node GPUs),
// but with one rank per node there is no intra-node peer and no NVLS, as in plugin/shimtable's
// grid: type_intra is LOC, nvls_support false, nvls_channels 0 and the nvls graph zero.
func FromNodeShape(n *tables.Node, nNodes, rpn int) (Topology, error) {
	if n == nil || rpn == 0 || rpn == n.Node.GPUsPerNode {
		return FromNode(n, nNodes)
	}
	if rpn < 0 {
		return Topology{}, fmt.Errorf("capabilities: %s: %d ranks per node: must be at least 1", n.File, rpn)
	}
	c := *n
	c.Node.GPUsPerNode = rpn
	t, err := FromNode(&c, nNodes)
	if err != nil || rpn > 1 {
		return t, err
	}
	for _, g := range []*Graph{&t.Graphs.Tree, &t.Graphs.Ring, &t.Graphs.CollNetDirect, &t.Graphs.CollNetChain} {
		g.TypeIntra = PathLOC
	}
	t.NVLSSupport, t.NVLSChannels, t.Graphs.NVLS = false, 0, Graph{}
	return t, t.Validate()
}

func fromNode(n *tables.Node, nNodes int) (Topology, error) {
	ni := &n.Node
	if nNodes < 1 {
		return Topology{}, fmt.Errorf("nNodes must be at least 1, got %d", nNodes)
	}
	if ni.GPUsPerNode < 1 {
		return Topology{}, fmt.Errorf("node.gpus_per_node: must be at least 1, got %d", ni.GPUsPerNode)
	}
	if ni.ComputeCapability < 1 {
		return Topology{}, fmt.Errorf("node.compute_capability: must be positive (90 for sm_90), got %d", ni.ComputeCapability)
	}
	if nNodes > math.MaxInt32/ni.GPUsPerNode {
		return Topology{}, fmt.Errorf("%d nodes x %d GPUs (node.gpus_per_node) is too many ranks", nNodes, ni.GPUsPerNode)
	}
	t := Topology{
		NNodes:              nNodes,
		NRanks:              nNodes * ni.GPUsPerNode,
		MinCompCap:          ni.ComputeCapability,
		MaxCompCap:          ni.ComputeCapability,
		NVSCount:            ni.NVSCount,
		CollNetEnable:       ni.CollNetEnable,
		CollNetChainSupport: ni.CollNetChainSupport,
		CollNetHeadsNum:     ni.CollNetHeadsNum,
		CollNetDirectNHeads: ni.CollNetDirectNHeads,
		NVLSSupport:         ni.NVLSSupport,
		MaxTreePattern:      ni.MaxTreePattern,
		NetDeviceType:       NetHost,
		MaxLocalRanks:       ni.GPUsPerNode,
		LocalRanks:          ni.GPUsPerNode,
		CUDARTVersion:       ni.CUDARTVersion,
	}
	if em := n.Emulation; em != nil {
		t.Emulated = Emulation{MulticastSwitch: em.MulticastSwitch, NVLSEfficiency: em.NVLSEfficiency,
			ReducingNetwork: em.ReducingNetwork}
		t.NVLSSupport = t.NVLSSupport || em.MulticastSwitch
		t.CollNetEnable = t.CollNetEnable || em.ReducingNetwork
		t.CollNetChainSupport = t.CollNetChainSupport || em.ReducingNetwork // the endpoint runs Chain too
		if em.ReducingNetwork {
			// The engine's endpoint is a plugin with iallgather and ireducescatter, and its
			// CollNetDirect makes every local rank a head (engine/collnet.go): NCCL's rule that
			// no node has more local ranks than CollNet heads then always holds.
			t.CollNetPluginIAllGather, t.CollNetPluginIReduceScatter = true, true
			t.CollNetHeadsNum = max(t.CollNetHeadsNum, t.MaxLocalRanks)
		}
	}
	if t.MaxTreePattern == 0 {
		t.MaxTreePattern = defaultMaxTreePattern
	} else if t.MaxTreePattern < PatternBalancedTree || t.MaxTreePattern > PatternTree {
		return Topology{}, fmt.Errorf("node.max_tree_pattern: must be 1..3, got %d", t.MaxTreePattern)
	}
	if t.CUDARTVersion == 0 {
		t.CUDARTVersion = defaultCUDARTVersion
	}
	var err error
	if t.CPUArch, err = ParseCPUArch(ni.CPUArch); err != nil {
		return Topology{}, fmt.Errorf("node.cpu_arch: %w", err)
	}
	if t.CPUVendor, err = ParseCPUVendor(ni.CPUVendor); err != nil {
		return Topology{}, fmt.Errorf("node.cpu_vendor: %w", err)
	}
	if ni.NetDeviceType != "" {
		if t.NetDeviceType, err = ParseNetDeviceType(ni.NetDeviceType); err != nil {
			return Topology{}, fmt.Errorf("node.net_device_type: %w", err)
		}
	}
	if f := n.Fabric; f != nil && nNodes > 1 { // the fabric's plugin moves the inter-node data
		if t.NetDeviceType, err = ParseNetDeviceType(f.Fabric.NetDeviceType); err != nil {
			return Topology{}, fmt.Errorf("%s: fabric.net_device_type: %w", f.File, err)
		}
	}
	for i, s := range ni.CollNetSupport {
		od, err := parseCollNetEntry(s)
		if err != nil {
			return Topology{}, fmt.Errorf("node.collnet_support[%d]: %w", i, err)
		}
		t.CollNetSupport = append(t.CollNetSupport, od)
	}

	key := NodeScaleKey(nNodes)
	sc, ok := n.Scale[key]
	if !ok {
		return Topology{}, fmt.Errorf("scale.%s: missing, needed for %d node(s)", key, nNodes)
	}
	t.CommNChannels = sc.CommNChannels
	t.NVLSChannels = sc.NVLSChannels
	var unknown []string
	for name := range sc.Graphs {
		if !slices.Contains(topoGraphNames, name) {
			unknown = append(unknown, fmt.Sprintf("%q", "scale."+key+".graphs."+name))
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return Topology{}, fmt.Errorf("unknown graph %s (want tree, ring, collnet_direct, collnet_chain or nvls)", strings.Join(unknown, ", "))
	}
	dst := []*Graph{&t.Graphs.Tree, &t.Graphs.Ring, &t.Graphs.CollNetDirect, &t.Graphs.CollNetChain, &t.Graphs.NVLS}
	for i, name := range topoGraphNames {
		g, ok := sc.Graphs[name]
		if !ok {
			continue
		}
		path := "scale." + key + ".graphs." + name + "."
		out := Graph{NChannels: g.NChannels, BwIntra: g.BwIntra, BwInter: g.BwInter,
			LatencyInter: g.LatencyInter, SameChannels: g.SameChannels}
		for _, f := range []struct {
			key string
			s   string
			dst *PathType
		}{{"type_intra", g.TypeIntra, &out.TypeIntra}, {"type_inter", g.TypeInter, &out.TypeInter}} {
			if f.s == "" {
				continue
			}
			if *f.dst, err = ParsePathType(f.s); err != nil {
				return Topology{}, fmt.Errorf("%s%s: %w", path, f.key, err)
			}
		}
		for _, f := range []struct {
			key string
			v   float64
		}{{"bw_intra", g.BwIntra}, {"bw_inter", g.BwInter}, {"latency_inter", g.LatencyInter}} {
			if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
				return Topology{}, fmt.Errorf("%s%s: want a finite number >= 0, got %v", path, f.key, f.v)
			}
		}
		*dst[i] = out
	}
	return t, nil
}

// NodeScaleKey returns the [scale.N] key of a node table that describes nNodes nodes: NCCL's index2
// scale, "1" for one node, "2" for two, "4" for three or more.
func NodeScaleKey(nNodes int) string {
	switch {
	case nNodes <= 1:
		return "1"
	case nNodes == 2:
		return "2"
	}
	return "4"
}

// FitCell is one [[fit.cell]] of a node table, parsed: the fitted latency (us) and algorithm
// bandwidth (GB/s) of a cell, and the ranks per node it was fitted at.
type FitCell struct {
	Coll   Coll
	Algo   Algo
	Proto  Proto
	LatUS  float64
	BWGBps float64
	// RanksPerNode is the cell's ranks_per_node, or the table's gpus_per_node where the cell has
	// none (an overlay written before the key was fitted at the table's shape).
	RanksPerNode int
}

// NodeFitCells returns the node table's fitted cells whose node count is nNodes (a cell fitted at
// 2 nodes says nothing about 4), at every ranks per node, in table order: the caller compares
// RanksPerNode with its own shape. Names that do not parse are errors naming the table file and
// the key.
func NodeFitCells(n *tables.Node, nNodes int) ([]FitCell, error) {
	if n == nil || n.Fit == nil {
		return nil, nil
	}
	var out []FitCell
	for i, c := range n.Fit.Cell {
		if c.Nodes != nNodes {
			continue
		}
		fc := FitCell{LatUS: c.LatUS, BWGBps: c.BWGBps, RanksPerNode: c.RanksPerNode}
		if fc.RanksPerNode == 0 {
			fc.RanksPerNode = n.Node.GPUsPerNode
		}
		var err error
		if fc.Coll, err = ParseColl(c.Coll); err == nil {
			if fc.Algo, err = ParseAlgo(c.Algo); err == nil {
				fc.Proto, err = ParseProto(c.Proto)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("capabilities: %s: fit.cell[%d]: %w", n.File, i, err)
		}
		out = append(out, fc)
	}
	return out, nil
}
