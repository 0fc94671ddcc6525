package algorithm

import (
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
)

// Call is what a kernel reads of a call (the engine's call fills it once the call is planned):
// its collective, this rank and the rank count, its dtype, its buffers (cut to size; Send nil where the rank
// sends nothing, Recv nil where it receives nothing), its element count and size, its root,
// whether it runs in place, and its plan's chunk in elements.
type Call struct {
	Coll       costmodel.Coll
	Rank, N    int
	Dt         kernels.Dtype
	Send, Recv []byte
	Count, ES  int
	Root       int
	InPlace    bool
	ChunkElems int
}

// DivUp is a/b rounded up.
func DivUp(a, b int) int { return (a + b - 1) / b }

// RoundUp is a rounded up to a multiple of b.
func RoundUp(a, b int) int { return DivUp(a, b) * b }

// Mod is a mod n in [0, n).
func Mod(a, n int) int { return ((a % n) + n) % n }

// AlignElems is NCCL's chunk alignment in elements: 16 bytes' worth.
func AlignElems(es int) int { return max(1, 16/es) }
