package cuda

import (
	"fmt"

	"github.com/collplan/collplan/kernels"
)

// Protocol names in kernel names, indexed as costmodel's protocols (LL, LL128, Simple).
var protoNames = [3]string{"ll", "ll128", "simple"}

// KernelName is the entry point of kernels.cu for an algorithm ("ring", "tree", "nvls"), a
// collective ("allreduce", ...), a type name (a dtype's, or b8..b64 for the copy collectives)
// and a protocol (0 LL, 1 LL128, 2 Simple).
func KernelName(algo, coll, typ string, proto int) string {
	return fmt.Sprintf("cp_%s_%s_%s_%s", algo, coll, typ, protoNames[proto])
}

// nvlsDtypes are the element types NVLS AllReduce has kernels for: those the switch reduces
// (engine's nvlsOpOK).
var nvlsDtypes = []kernels.Dtype{kernels.Int32, kernels.Uint32, kernels.Int64, kernels.Uint64,
	kernels.Float16, kernels.Float32, kernels.Float64, kernels.Bfloat16}

// KernelNames lists every entry point a module built for compute capability major.minor has:
// the reduction collectives (Ring AllReduce, ReduceScatter, Reduce, Tree AllReduce) for every
// dtype and protocol, the copy collectives (Ring AllGather, Broadcast) for every element size and
// protocol, and, from sm_90 on, NVLS AllReduce with Simple for the types the switch reduces.
func KernelNames(major int) []string {
	var names []string
	for d := range kernels.Dtype(kernels.NumDtypes) {
		for p := range protoNames {
			names = append(names, KernelName("ring", "allreduce", d.String(), p), KernelName("ring", "reducescatter", d.String(), p),
				KernelName("ring", "reduce", d.String(), p), KernelName("tree", "allreduce", d.String(), p))
		}
	}
	for _, b := range []string{"b8", "b16", "b32", "b64"} {
		for p := range protoNames {
			names = append(names, KernelName("ring", "allgather", b, p), KernelName("ring", "broadcast", b, p))
		}
	}
	if major >= 9 {
		for _, d := range nvlsDtypes {
			names = append(names, KernelName("nvls", "allreduce", d.String(), 2))
		}
	}
	return names
}
