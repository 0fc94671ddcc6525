// Package capabilities describes what a communicator's hardware and environment allow: the Topology
// that feeds the cost model, the legality of each (collective, algorithm, protocol) cell, the
// NCCL_ALGO/NCCL_PROTO grammar, hardware probes and NCCL's double binary tree.
//
// The enumerations live here, at the bottom of the import graph, so that the legality mask and the
// env grammar can name cells; costmodel re-exports Coll, Algo and Proto under its own name.
// Indices and names follow NCCL 2.30 (reference/nccl-costmodel.md §0).
package capabilities

import (
	"fmt"
	"strings"
)

// Coll is a modelled collective, with NCCL's ncclFunc index.
type Coll int

// Collectives in NCCL's order.
const (
	Broadcast Coll = iota
	Reduce
	AllGather
	ReduceScatter
	AllReduce
	NumColls = 5
)

var collNames = [NumColls]string{"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"}

// String returns NCCL's function name (Broadcast, ..., AllReduce).
func (c Coll) String() string {
	if c < 0 || c >= NumColls {
		return fmt.Sprintf("Coll(%d)", int(c))
	}
	return collNames[c]
}

// ParseColl accepts NCCL's function names case-insensitively and the nccl-tests spellings
// (all_reduce, allreduce).
func ParseColl(s string) (Coll, error) {
	k := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "_", "")
	for c := Coll(0); c < NumColls; c++ {
		if strings.ToLower(collNames[c]) == k {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown collective %q (want broadcast, reduce, allgather, reducescatter or allreduce)", s)
}

// Algo is an algorithm with NCCL's index.
type Algo int

// Algorithms in NCCL's order.
const (
	Tree Algo = iota
	Ring
	CollNetDirect
	CollNetChain
	NVLS
	NVLSTree
	PAT
	NumAlgos = 7
)

var (
	algoEnvNames = [NumAlgos]string{"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"}
	algoLogNames = [NumAlgos]string{"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"}
)

// String returns NCCL's log name (ncclAlgoToString): TREE, RING, COLLNET_DIRECT, ...
func (a Algo) String() string {
	if a < 0 || a >= NumAlgos {
		return fmt.Sprintf("Algo(%d)", int(a))
	}
	return algoLogNames[a]
}

// EnvName returns the name NCCL_ALGO uses (Tree, Ring, CollNetDirect, ...).
func (a Algo) EnvName() string {
	if a < 0 || a >= NumAlgos {
		return a.String()
	}
	return algoEnvNames[a]
}

// ParseAlgo accepts the env names and the log names, case-insensitively.
func ParseAlgo(s string) (Algo, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	for a := Algo(0); a < NumAlgos; a++ {
		if strings.ToLower(algoEnvNames[a]) == k || strings.ToLower(algoLogNames[a]) == k {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q", s)
}

// Proto is a wire protocol with NCCL's index.
type Proto int

// Protocols in NCCL's order.
const (
	LL Proto = iota
	LL128
	Simple
	NumProtos = 3
)

var (
	protoEnvNames = [NumProtos]string{"LL", "LL128", "Simple"}
	protoLogNames = [NumProtos]string{"LL", "LL128", "SIMPLE"}
)

// String returns NCCL's log name: LL, LL128, SIMPLE.
func (p Proto) String() string {
	if p < 0 || p >= NumProtos {
		return fmt.Sprintf("Proto(%d)", int(p))
	}
	return protoLogNames[p]
}

// EnvName returns the name NCCL_PROTO uses (LL, LL128, Simple).
func (p Proto) EnvName() string {
	if p < 0 || p >= NumProtos {
		return p.String()
	}
	return protoEnvNames[p]
}

// ParseProto accepts LL, LL128 and Simple, case-insensitively.
func ParseProto(s string) (Proto, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	for p := Proto(0); p < NumProtos; p++ {
		if strings.ToLower(protoEnvNames[p]) == k {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown protocol %q", s)
}

// Op is a reduction operation as the user names it, with ncclRedOp_t's index (ncclSum 0, ncclProd 1,
// ncclMax 2, ncclMin 3, ncclAvg 4; user-created PreMulSum ops start at 5).
type Op int

// Reduction operations.
const (
	Sum Op = iota
	Prod
	Max
	Min
	Avg
	PreMulSum
	NumOps = 6
)

var opNames = [NumOps]string{"sum", "prod", "max", "min", "avg", "premulsum"}

func (o Op) String() string {
	if o < 0 || o >= NumOps {
		return fmt.Sprintf("Op(%d)", int(o))
	}
	return opNames[o]
}

// ParseOp accepts sum prod min max avg premulsum and nccl-tests' alias mulsum.
func ParseOp(s string) (Op, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	if k == "mulsum" {
		return PreMulSum, nil
	}
	for o := Op(0); o < NumOps; o++ {
		if opNames[o] == k {
			return o, nil
		}
	}
	return 0, fmt.Errorf("unknown op %q (want sum, prod, min, max, avg, premulsum or mulsum)", s)
}

// Dtype is an element type.
type Dtype int

// Element types, in ncclDataType_t order.
const (
	Int8 Dtype = iota
	Uint8
	Int32
	Uint32
	Int64
	Uint64
	Float16
	Float32
	Float64
	Bfloat16
	Fp8E4M3
	Fp8E5M2
	NumDtypes = 12
)

var dtypeNames = [NumDtypes]string{"int8", "uint8", "int32", "uint32", "int64", "uint64",
	"float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"}

// nccl-tests' names for the same types.
var dtypeAliases = map[string]Dtype{"half": Float16, "float": Float32, "double": Float64,
	"f8e4m3": Fp8E4M3, "f8e5m2": Fp8E5M2}

func (d Dtype) String() string {
	if d < 0 || d >= NumDtypes {
		return fmt.Sprintf("Dtype(%d)", int(d))
	}
	return dtypeNames[d]
}

// ParseDtype accepts collplan's names and nccl-tests' aliases (half float double f8e4m3 f8e5m2).
func ParseDtype(s string) (Dtype, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	if d, ok := dtypeAliases[k]; ok {
		return d, nil
	}
	for d := Dtype(0); d < NumDtypes; d++ {
		if dtypeNames[d] == k {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unknown dtype %q (want int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64 fp8e4m3 fp8e5m2, or half float double f8e4m3 f8e5m2)", s)
}

// Size returns the element size in bytes.
func (d Dtype) Size() int {
	switch d {
	case Int8, Uint8, Fp8E4M3, Fp8E5M2:
		return 1
	case Float16, Bfloat16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	default:
		return 8
	}
}

// IsFloat reports whether avg is a pre-multiplied sum (PreMulSum) rather than SumPostDiv.
func (d Dtype) IsFloat() bool { return d >= Float16 }

// IsFP8 reports the two 8-bit float formats.
func (d Dtype) IsFP8() bool { return d == Fp8E4M3 || d == Fp8E5M2 }

// PathType is a topology path class, NCCL's PATH_* index (LOC 0 ... DIS 11).
type PathType int

// Path types in NCCL's order.
const (
	PathLOC PathType = iota
	PathNVL
	PathNVB
	PathC2C
	PathPIX
	PathPXB
	PathP2C
	PathPXN
	PathPHB
	PathSYS
	PathNET
	PathDIS
	numPathTypes
)

var pathNames = [numPathTypes]string{"LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS"}

func (t PathType) String() string {
	if t < 0 || t >= numPathTypes {
		return fmt.Sprintf("PathType(%d)", int(t))
	}
	return pathNames[t]
}

// ParsePathType accepts LOC NVL NVB C2C PIX PXB P2C PXN PHB SYS NET DIS (case-insensitive).
func ParsePathType(s string) (PathType, error) {
	k := strings.ToUpper(strings.TrimSpace(s))
	for t := PathType(0); t < numPathTypes; t++ {
		if pathNames[t] == k {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown path type %q (want LOC NVL NVB C2C PIX PXB P2C PXN PHB SYS NET DIS)", s)
}

// CPUArch is the host CPU architecture class NCCL distinguishes.
type CPUArch int

// CPU architectures.
const (
	ArchX86 CPUArch = iota
	ArchPower
	ArchARM
)

var archNames = []string{"x86", "power", "arm"}

func (a CPUArch) String() string {
	if a < 0 || int(a) >= len(archNames) {
		return fmt.Sprintf("CPUArch(%d)", int(a))
	}
	return archNames[a]
}

// ParseCPUArch accepts x86, power and arm.
func ParseCPUArch(s string) (CPUArch, error) {
	for i, n := range archNames {
		if n == strings.ToLower(strings.TrimSpace(s)) {
			return CPUArch(i), nil
		}
	}
	return 0, fmt.Errorf("unknown cpu_arch %q (want x86, power or arm)", s)
}

// CPUVendor is the host CPU vendor; VendorUndefined is NCCL's -1 (ARM and POWER hosts).
type CPUVendor int

// CPU vendors.
const (
	VendorUndefined CPUVendor = iota - 1
	VendorIntel
	VendorAMD
	VendorZhaoxin
	VendorMixed
)

var vendorNames = map[CPUVendor]string{VendorUndefined: "undefined", VendorIntel: "intel",
	VendorAMD: "amd", VendorZhaoxin: "zhaoxin", VendorMixed: "mixed"}

func (v CPUVendor) String() string {
	if n, ok := vendorNames[v]; ok {
		return n
	}
	return fmt.Sprintf("CPUVendor(%d)", int(v))
}

// ParseCPUVendor accepts intel, amd, zhaoxin, mixed and undefined.
func ParseCPUVendor(s string) (CPUVendor, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	for v, n := range vendorNames {
		if n == k {
			return v, nil
		}
	}
	return 0, fmt.Errorf("unknown cpu_vendor %q (want intel, amd, zhaoxin, mixed or undefined)", s)
}

// NetDeviceType is how the network plugin moves data (NCCL_NET_DEVICE_*).
type NetDeviceType int

// Net device types.
const (
	NetHost NetDeviceType = iota
	NetUnpack
	NetCUDA
)

var netNames = []string{"host", "unpack", "cuda"}

func (n NetDeviceType) String() string {
	if n < 0 || int(n) >= len(netNames) {
		return fmt.Sprintf("NetDeviceType(%d)", int(n))
	}
	return netNames[n]
}

// ParseNetDeviceType accepts host, unpack and cuda.
func ParseNetDeviceType(s string) (NetDeviceType, error) {
	for i, n := range netNames {
		if n == strings.ToLower(strings.TrimSpace(s)) {
			return NetDeviceType(i), nil
		}
	}
	return 0, fmt.Errorf("unknown net_device_type %q (want host, unpack or cuda)", s)
}

// Tree patterns (NCCL_TOPO_PATTERN_*), the values of max_tree_pattern.
const (
	PatternBalancedTree = 1
	PatternSplitTree    = 2
	PatternTree         = 3
)
