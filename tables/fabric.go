package tables

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"sort"
	"strings"

	"github.com/collplan/collplan/internal/configfile"
)

// The fabric tables shipped in the binary: fabric/NAME.toml.
//
//go:embed fabric/*.toml
var embeddedFabrics embed.FS

const fabricDir = "fabric"

// fabricMaxDepth is how deeply a fabric table nests: provenance.sources[i] is 3 levels.
const fabricMaxDepth = 3

// Fabric is one fabric table, tables/fabric/NAME.toml: the inter-node network of a cluster (NICs,
// the PCI path from a GPU to its NIC, the net plugin's latency), which WithFabric composes with a
// node table's intra-node graphs for every node count above one.
type Fabric struct {
	Fabric     FabricInfo `toml:"fabric"`
	Provenance Provenance `toml:"provenance"`

	// Name is the fabric's name (file name without .toml); File is where it was read from.
	Name string `toml:"-"`
	File string `toml:"-"`
	// Sources maps each numeric key's dotted path ("fabric.nic_gbps") to its trailing comment.
	Sources map[string]string `toml:"-"`
}

// FabricInfo is the [fabric] table. Every key is required.
type FabricInfo struct {
	Description string `toml:"description"`
	// NICGbps is one physical NIC port's line rate in Gbit/s (400 for NDR).
	NICGbps float64 `toml:"nic_gbps"`
	// NICsPerNode counts the node's NIC ports on the inter-node (GPU) network.
	NICsPerNode int `toml:"nics_per_node"`
	// NICsPerNetDevice is how many NIC ports the net plugin fuses into one NCCL net device (1 for
	// NCCL's own IB transport; 4 for aws-ofi-nccl's multi-rail devices on p5). It must divide
	// NICsPerNode.
	NICsPerNetDevice int `toml:"nics_per_net_device"`
	// TypeInter is the PCI path type from a GPU to its NIC (the graphs' type_inter).
	TypeInter string `toml:"type_inter"`
	// LatencyInterUS is the net plugin's latency property in us (the graphs' latency_inter).
	LatencyInterUS float64 `toml:"latency_inter_us"`
	// NetDeviceType is the plugin's NCCL_NET_DEVICE_* kind: host, unpack or cuda.
	NetDeviceType string `toml:"net_device_type"`
}

// fabricRequired are the [fabric] keys a fabric table must set.
var fabricRequired = []string{"description", "nic_gbps", "nics_per_node", "nics_per_net_device",
	"type_inter", "latency_inter_us", "net_device_type"}

// FabricNames lists the embedded fabric tables, sorted.
func FabricNames() []string {
	entries, err := fs.ReadDir(embeddedFabrics, fabricDir)
	if err != nil { // cannot happen: the directory is embedded
		return nil
	}
	var names []string
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, tableSuffix) {
			names = append(names, strings.TrimSuffix(n, tableSuffix))
		}
	}
	sort.Strings(names)
	return names
}

// LoadFabric decodes the embedded fabric table fabric/NAME.toml.
func LoadFabric(name string) (*Fabric, error) {
	name = strings.TrimSuffix(name, tableSuffix)
	if name == "" || strings.ContainsAny(name, `/\`) {
		return nil, fmt.Errorf("tables: bad fabric name %q", name)
	}
	file := fabricDir + "/" + name + tableSuffix
	data, err := embeddedFabrics.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tables: no embedded fabric %q (have %s)", name, strings.Join(FabricNames(), ", "))
	}
	return DecodeFabric(name+tableSuffix, data)
}

// LoadFabricFile decodes a fabric table from disk (at most configfile.MaxBytes).
func LoadFabricFile(p string) (*Fabric, error) {
	data, err := configfile.Read(p)
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	return DecodeFabric(p, data)
}

// ResolveFabric loads --fabric's value: a path when it ends in .toml, else an embedded name.
func ResolveFabric(v string) (*Fabric, error) {
	if strings.HasSuffix(v, tableSuffix) {
		return LoadFabricFile(v)
	}
	return LoadFabric(v)
}

// DecodeFabric strictly decodes one fabric table: unknown keys, missing keys, type mismatches and
// values out of range are errors naming the file and the key (and the line when known).
func DecodeFabric(file string, data []byte) (*Fabric, error) {
	var f Fabric
	md, err := configfile.DecodeTOML(file, data, fabricMaxDepth, &f)
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	sc := scanSource(data)
	var errs []error
	for _, k := range md.Undecoded() {
		errs = append(errs, &KeyError{File: file, Line: sc.flat[strings.Join(k, ".")], Key: k.String(), Msg: "unknown key"})
	}
	for _, k := range fabricRequired {
		if !md.IsDefined("fabric", k) {
			line := sc.lineOf("fabric")
			errs = append(errs, &KeyError{File: file, Line: line, Key: "fabric." + k, Msg: "missing (every [fabric] key is required)"})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := problemsError(file, sc, validateFabric(&f.Fabric)); err != nil {
		return nil, err
	}
	f.Name = tableName(file)
	f.File = file
	f.Sources = sc.sources
	return &f, nil
}

func validateFabric(fi *FabricInfo) []problem {
	var v validator
	if math.IsNaN(fi.NICGbps) || math.IsInf(fi.NICGbps, 0) || fi.NICGbps <= 0 {
		v.add("fabric.nic_gbps", "%v must be finite and > 0", fi.NICGbps)
	}
	v.intRange("fabric.nics_per_node", fi.NICsPerNode, 1, 64)
	v.intRange("fabric.nics_per_net_device", fi.NICsPerNetDevice, 1, 64)
	if fi.NICsPerNetDevice >= 1 && fi.NICsPerNode >= 1 && fi.NICsPerNode%fi.NICsPerNetDevice != 0 {
		v.add("fabric.nics_per_net_device", "%d does not divide nics_per_node %d", fi.NICsPerNetDevice, fi.NICsPerNode)
	}
	v.word("fabric.type_inter", pathTypes, fi.TypeInter)
	v.bw("fabric.latency_inter_us", fi.LatencyInterUS)
	v.word("fabric.net_device_type", netDeviceTypes, fi.NetDeviceType)
	return v.ps
}

// NetDevices is nics_per_node / nics_per_net_device: the node's NCCL net devices.
func (fi *FabricInfo) NetDevices() int { return fi.NICsPerNode / fi.NICsPerNetDevice }

// NetDeviceGBps is nic_gbps x nics_per_net_device x 1000 / 8000 GB/s: one net device's bandwidth as
// NCCL's topology holds it (NCCL reads the plugin's speed in Mbit/s and stores
// net.bw = mbps / 8000.0, src/graph/topo.cc; the line rate and port count come from the table).
func (fi *FabricInfo) NetDeviceGBps() float64 {
	return fi.NICGbps * float64(fi.NICsPerNetDevice) * 1000 / 8000
}

// BwInter is bw_inter = min(bw_intra, dev_GBps x devices / max(devices, nCh)) GB/s per channel,
// the inter-node bandwidth of a graph of nCh channels whose intra-node bandwidth is bwIntra, with
// dev_GBps = NetDeviceGBps and devices = NetDevices (both from the fabric table's sourced numbers).
// NCCL's search routes each channel of a multi-node graph through one net device and takes its
// bwInter off that device's NET link, so nCh channels spread over the devices get at most dev_GBps
// each and dev_GBps x devices together; the search starts with bwIntra = bwInter and later raises
// only bwIntra (search.cc, pass 2), so bwInter <= bwIntra. NCCL also rounds down to its speed
// array; that step is not modelled (the result is an upper bound on it). A graph with no channels
// gives 0.
func (fi *FabricInfo) BwInter(bwIntra float64, nCh int) float64 {
	if nCh <= 0 {
		return 0
	}
	devs := fi.NetDevices()
	return math.Min(bwIntra, fi.NetDeviceGBps()*float64(devs)/float64(max(devs, nCh)))
}

// WithFabric returns a copy of n whose multi-node scales (every [scale.N] but "1") take their
// inter-node inputs from f: in each graph with channels, bw_inter = f.BwInter(bw_intra,
// n_channels), type_inter = f's type_inter and latency_inter = f's latency_inter_us; the
// intra-node values (n_channels, bw_intra, type_intra, ...) stay n's. Scale 1 is untouched.
// Node.Fabric records f, so that capabilities.FromNode also takes f's net_device_type above one
// node. The rewritten keys' Sources say "fabric FILE". n is not modified.
func WithFabric(n *Node, f *Fabric) (*Node, error) {
	if n == nil || f == nil {
		return nil, fmt.Errorf("tables: WithFabric: nil table")
	}
	out := *n
	out.Scale = make(map[string]Scale, len(n.Scale))
	out.Sources = make(map[string]string, len(n.Sources))
	for k, v := range n.Sources {
		out.Sources[k] = v
	}
	tag := "fabric " + f.File
	for key, sc := range n.Scale {
		if key == "1" {
			out.Scale[key] = sc
			continue
		}
		ns := sc
		ns.Graphs = make(map[string]Graph, len(sc.Graphs))
		for name, g := range sc.Graphs {
			if g.NChannels > 0 {
				p := "scale." + key + ".graphs." + name + "."
				g.BwInter = f.Fabric.BwInter(g.BwIntra, g.NChannels)
				g.TypeInter = f.Fabric.TypeInter
				g.LatencyInter = f.Fabric.LatencyInterUS
				out.Sources[p+"bw_inter"] = tag + " (derived: min(bw_intra, device GB/s x devices / max(devices, n_channels)))"
				out.Sources[p+"latency_inter"] = tag
			}
			ns.Graphs[name] = g
		}
		out.Scale[key] = ns
	}
	out.Fabric = f
	return &out, nil
}
