// Package tables holds collplan's node tables: TOML files that describe one kind of machine (GPU,
// CPU, NVSwitch facts, NCCL's graph-search results per scale, optional constant overrides and
// corrections), embedded in the binary and decoded strictly.
package tables

// Node is one node table, as decoded from NAME.toml (plus NAME.fit.toml when present).
type Node struct {
	Node        NodeInfo         `toml:"node"`
	Constants   *Constants       `toml:"constants"`
	Scale       map[string]Scale `toml:"scale"` // keys "1", "2", "4": 1 node, 2 nodes, 3 or more (NCCL's index2; ScaleFor)
	Corrections *Corrections     `toml:"corrections"`
	Fit         *Fit             `toml:"fit"`
	Emulation   *Emulation       `toml:"emulation"`
	Provenance  Provenance       `toml:"provenance"`

	// Name is the table's name (file name without .toml); File is where it was read from.
	Name string `toml:"-"`
	File string `toml:"-"`
	// Sources maps each numeric key's dotted path (e.g. "scale.1.graphs.ring.bw_intra") to the
	// source tag written in its trailing comment ("reference §13 S1", "estimate", ...).
	Sources map[string]string `toml:"-"`
	// Overlay is the fitted overlay's file name when one was applied, else "".
	Overlay string `toml:"-"`
	// Fabric is the fabric table WithFabric composed in (its inter-node inputs replace the
	// table's above one node), else nil.
	Fabric *Fabric `toml:"-"`
}

// NodeInfo is the [node] table: facts about one machine of this kind.
type NodeInfo struct {
	GPU                 string   `toml:"gpu"`
	GPUsPerNode         int      `toml:"gpus_per_node"`
	ComputeCapability   int      `toml:"compute_capability"` // 90 for sm_90
	CPUArch             string   `toml:"cpu_arch"`           // x86 | power | arm
	CPUVendor           string   `toml:"cpu_vendor"`         // intel | amd | zhaoxin | mixed | undefined
	NVSCount            int      `toml:"nvs_count"`
	NVLSSupport         bool     `toml:"nvls_support"`
	NetDeviceType       string   `toml:"net_device_type"` // host | unpack | cuda
	CUDARTVersion       int      `toml:"cudart_version"`
	MaxTreePattern      int      `toml:"max_tree_pattern"`
	CollNetEnable       bool     `toml:"collnet_enable"`
	CollNetChainSupport bool     `toml:"collnet_chain_support"`
	CollNetHeadsNum     int      `toml:"collnet_heads_num"`
	CollNetDirectNHeads int      `toml:"collnet_direct_n_heads"`
	CollNetSupport      []string `toml:"collnet_support"` // "op:dtype"
	Note                string   `toml:"note"`
}

// CPUGPU is the [node] gpu of a table whose "GPUs" are CPU ranks of collplan's own engine (the cpu
// table); every other value names a real GPU.
const CPUGPU = "cpu"

// IsCPU reports whether the table describes CPU ranks of collplan's engine (gpu = "cpu") rather
// than GPUs: only such a table can be measured here with collbench.
func (i *NodeInfo) IsCPU() bool { return i.GPU == CPUGPU }

// Emulation is the optional [emulation] table of an emulated node: what collplan's CPU engine runs
// in software that the [node] facts say the host lacks. Only an emulated node has one, and a node is
// emulated when its ranks are the engine's CPU ranks: node.gpu = "cpu" (NodeInfo.IsCPU); the
// validator refuses the table on any other. The [node] facts stay the host's (nvs_count = 0,
// nvls_support = false, collnet_enable = false, the compute capability that gates LL128, the
// Ring/Simple plateau and the ceilings rows): the emulated paths are declared here, beside them.
type Emulation struct {
	// MulticastSwitch declares an emulated NVSwitch with multicast (the engine's multicast object:
	// ldReduce and st over every local rank's buffer, the issuing rank doing the switch's adds). It
	// makes NVLS and NVLS_TREE legal where nvls_support = true would (NCCL's rules otherwise:
	// Simple only, the ncclNvlsSupported op/dtype rule, multi-node NVLS only with CollNet), allows
	// nvls_channels and an nvls graph in [scale.N], and counts as the NVSwitch CollNetDirect needs.
	MulticastSwitch bool `toml:"multicast_switch" json:"multicast_switch"`
	// NVLSEfficiency is the emulated switch's efficiency, 0 < e <= 1, which the model reads in
	// place of tuning.cc's nvlsEfficiency[compCapIndex] (0 below sm_90, so NCCL's own row would
	// price NVLS at bandwidth 0 here). Required with multicast_switch; source-tagged.
	NVLSEfficiency float64 `toml:"nvls_efficiency" json:"nvls_efficiency"`
	// ReducingNetwork declares an emulated reducing network (the engine's CollNet aggregation
	// endpoint): CollNet is legal as collnet_enable = true makes it, for the (op, dtype) pairs of
	// node.collnet_support, which must then list what the endpoint reduces.
	ReducingNetwork bool `toml:"reducing_network" json:"reducing_network"`
}

// Scale is [scale.N]: what NCCL's topology search gives at this node count.
type Scale struct {
	CommNChannels int              `toml:"comm_n_channels"`
	NVLSChannels  int              `toml:"nvls_channels"`
	Graphs        map[string]Graph `toml:"graphs"` // tree ring collnet_direct collnet_chain nvls
}

// Graph is one searched graph, with the topology file's keys.
type Graph struct {
	NChannels    int     `toml:"n_channels"`
	BwIntra      float64 `toml:"bw_intra"`
	BwInter      float64 `toml:"bw_inter"`
	TypeIntra    string  `toml:"type_intra"`
	TypeInter    string  `toml:"type_inter"`
	LatencyInter float64 `toml:"latency_inter"`
	SameChannels bool    `toml:"same_channels"`
}

// Constants is the optional [constants] table: overrides of the tuner constants
// (reference/nccl-costmodel.md §1). Absent entries keep NCCL's defaults. Per-algorithm rows are
// [LL, LL128, Simple]; ceilings rows are [N1, N2, N4].
type Constants struct {
	BaseLatencies        map[string][]float64            `toml:"base_latencies"`            // algo -> [3]
	HWLatencies          map[string]map[string][]float64 `toml:"hw_latencies"`              // nvlink|pci|net -> algo -> [3]
	LLMaxBws             [][]float64                     `toml:"ll_max_bws"`                // [4][3]
	PerChMaxRingLL128Bws [][]float64                     `toml:"per_ch_max_ring_ll128_bws"` // [4][3]
	PerChMaxTreeLL128Bws [][]float64                     `toml:"per_ch_max_tree_ll128_bws"` // [4][3]
	PerChMaxTreeBws      [][]float64                     `toml:"per_ch_max_tree_bws"`       // [4][3]
	PerChMaxNVLSTreeBws  [][]float64                     `toml:"per_ch_max_nvls_tree_bws"`  // [4][3]
}

// Corrections is the optional [corrections] table: bandwidth factors per cell and log2 bucket.
type Corrections struct {
	Cell []CorrectionCell `toml:"cell"`
}

// CorrectionCell gives factors for one (coll, algo, proto); Factors[i] applies to nBytes in
// [64*2^i, 64*2^(i+1)). Up to 24 buckets; missing buckets are 1. Without nodes and ranks_per_node
// the row applies at every shape; with them (both, >= 1) only at that shape, where it replaces the
// shape-less row of its cell: calibrate fits a shape's corrections against that shape's fitted
// cells, so they are written, kept and applied per shape as the cells are.
type CorrectionCell struct {
	Coll         string    `toml:"coll"`
	Algo         string    `toml:"algo"`
	Proto        string    `toml:"proto"`
	Nodes        int       `toml:"nodes"`
	RanksPerNode int       `toml:"ranks_per_node"`
	Factors      []float64 `toml:"factors"`
}

// At reports whether the row applies at nodes x ranksPerNode.
func (c CorrectionCell) At(nodes, ranksPerNode int) bool {
	return c.Nodes == 0 || (c.Nodes == nodes && c.RanksPerNode == ranksPerNode)
}

// Fit is the optional [fit] table that calibrate writes into NAME.fit.toml: the effective latency
// and bandwidth of measured cells, which replace the model's after it is built. Each cell applies to
// the node count it was fitted at only.
type Fit struct {
	Cell []FitCell `toml:"cell"`
}

// FitCell is one fitted (coll, algo, proto) cell at one shape: nodes x ranks_per_node. Algo and
// proto use the tables' names (e.g. "tree", "ll128"); ranks_per_node >= 1 when present (absent, 0:
// the table's gpus_per_node, the shape every overlay written before the key existed was fitted
// at); lat_us >= 0, bw_gbps > 0, sigmas >= 0 (1-sigma uncertainties in the same units; 0 when not
// estimated), points >= 1 is the number of measured points behind the cell.
type FitCell struct {
	Coll         string  `toml:"coll"`
	Algo         string  `toml:"algo"`
	Proto        string  `toml:"proto"`
	Nodes        int     `toml:"nodes"`
	RanksPerNode int     `toml:"ranks_per_node"`
	LatUS        float64 `toml:"lat_us"`
	BWGBps       float64 `toml:"bw_gbps"`
	LatSigma     float64 `toml:"lat_sigma"`
	BWSigma      float64 `toml:"bw_sigma"`
	Points       int     `toml:"points"`
}

// Provenance records where a table's numbers come from.
type Provenance struct {
	Sources      []string    `toml:"sources"`
	Notes        string      `toml:"notes"`
	Date         string      `toml:"date"`
	FittedFrom   []InputFile `toml:"fitted_from"`
	NCCLVersions []string    `toml:"nccl_versions"`
	Residual     *Residual   `toml:"residual"`
}

// InputFile is one sweep file a fit used. Nodes and RanksPerNode, when set (both), are the shape
// of the fit it went into: an overlay fitted shape by shape names every shape's files.
type InputFile struct {
	File         string `toml:"file"`
	SHA256       string `toml:"sha256"`
	Nodes        int    `toml:"nodes"`
	RanksPerNode int    `toml:"ranks_per_node"`
}

// Residual summarises a fit's relative errors.
type Residual struct {
	Points    int     `toml:"points"`
	MedianRel float64 `toml:"median_rel"`
	MaxRel    float64 `toml:"max_rel"`
}
