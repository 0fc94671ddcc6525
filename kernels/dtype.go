package kernels

import "strconv"

// Dtype is an element type, numbered as NCCL's ncclDataType_t.
type Dtype int

// The element types, in ncclDataType_t order.
const (
	Int8     Dtype = iota // ncclInt8
	Uint8                 // ncclUint8
	Int32                 // ncclInt32
	Uint32                // ncclUint32
	Int64                 // ncclInt64
	Uint64                // ncclUint64
	Float16               // ncclFloat16 (IEEE binary16)
	Float32               // ncclFloat32
	Float64               // ncclFloat64
	Bfloat16              // ncclBfloat16
	Fp8E4M3               // ncclFloat8e4m3 (OCP E4M3FN: no infinities, max 448)
	Fp8E5M2               // ncclFloat8e5m2 (IEEE-like, has infinities, max 57344)

	// NumDtypes is the number of element types.
	NumDtypes = iota
)

var dtypeNames = [NumDtypes]string{
	"int8", "uint8", "int32", "uint32", "int64", "uint64",
	"float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2",
}

var dtypeSizes = [NumDtypes]int{1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1}

// Valid reports whether d is one of the defined element types.
func (d Dtype) Valid() bool { return d >= 0 && d < NumDtypes }

// Size returns the size of one element in bytes, or 0 for an invalid Dtype.
func (d Dtype) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeSizes[d]
}

// IsFloat reports whether d is a floating-point type.
func (d Dtype) IsFloat() bool { return d >= Float16 && d < NumDtypes }

// IsSigned reports whether d is a signed integer type.
func (d Dtype) IsSigned() bool { return d == Int8 || d == Int32 || d == Int64 }

// String returns the name nccl-tests uses for d ("float32", "bfloat16", ...).
func (d Dtype) String() string {
	if !d.Valid() {
		return "Dtype(" + strconv.Itoa(int(d)) + ")"
	}
	return dtypeNames[d]
}

// Op is a user reduction operator. Sum..Avg are numbered as NCCL's built-in
// ncclRedOp_t; PreMulSum stands for an operator made with
// ncclRedOpCreatePreMulSum, whose handles start at ncclNumOps (5).
type Op int

// The user reduction operators.
const (
	Sum       Op = iota // ncclSum
	Prod                // ncclProd
	Max                 // ncclMax
	Min                 // ncclMin
	Avg                 // ncclAvg
	PreMulSum           // ncclRedOpCreatePreMulSum: Σ(x_i·scalar)

	// NumOps is the number of user operators.
	NumOps = iota
)

var opNames = [NumOps]string{"sum", "prod", "max", "min", "avg", "premulsum"}

// Valid reports whether o is one of the defined operators.
func (o Op) Valid() bool { return o >= 0 && o < NumOps }

// String returns the name nccl-tests uses for o ("sum", "avg", ...).
func (o Op) String() string {
	if !o.Valid() {
		return "Op(" + strconv.Itoa(int(o)) + ")"
	}
	return opNames[o]
}

// DevOp is the device form NCCL lowers a user operator to, numbered as
// ncclDevRedOp_t (src/include/device.h).
type DevOp int

// The device operators.
const (
	DevSum        DevOp = iota // ncclDevSum
	DevProd                    // ncclDevProd
	DevMinMax                  // ncclDevMinMax: min or max, chosen by the argument
	DevPreMulSum               // ncclDevPreMulSum: Σ(x_i·scalar)
	DevSumPostDiv              // ncclDevSumPostDiv: (Σx_i)/n, integers only

	// NumDevOps is the number of device operators.
	NumDevOps = iota
)

var devOpNames = [NumDevOps]string{"Sum", "Prod", "MinMax", "PreMulSum", "SumPostDiv"}

// String returns the ncclDevRedOp_t name without its prefix.
func (o DevOp) String() string {
	if o < 0 || o >= NumDevOps {
		return "DevOp(" + strconv.Itoa(int(o)) + ")"
	}
	return devOpNames[o]
}
