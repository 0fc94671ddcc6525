// Package nvls is the geometry of the engine's NVLS multicast object: the region that stands for
// the buffers NCCL binds into one multicast group per node and channel (src/transport/nvls.cc,
// ncclNvlsBufferSetup), its name, its layout word and the offsets of its counters and buffers.
// The engine (engine/nvls.go) maps the region and runs ldReduce and st over it; a CUDA kernel with
// multimem instructions binds the same layout (kernels/cuda's layout_gen.h is generated from it).
//
// Region layout ("nvls/NODE/CH", Members members, S = StepBytes, the step's bytes per head):
//
//	line 0              layout word (Members and S)
//	line 1+3m           member m's posted counter: steps whose input m has scattered
//	line 2+3m           member m's reduced counter: steps whose share m has ld_reduced and st'd
//	line 3+3m           member m's done counter: steps m has finished: the slot is free again
//	then per member m   up buffer:   NCCL_STEPS slots of Members*S bytes (share h at h*S)
//	                    down buffer: NCCL_STEPS slots of Members*S bytes
package nvls

import (
	"strconv"

	"github.com/collplan/collplan/engine/internal/wire"
)

// Region returns the name of the multicast object of virtual node node on channel ch:
// "nvls/NODE/CH".
func Region(node, ch int) string {
	b := make([]byte, 0, 16)
	b = append(b, "nvls/"...)
	b = strconv.AppendInt(b, int64(node), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(ch), 10)
	return string(b)
}

// Layout is the geometry of a multicast object's region (the package comment's layout): Members
// members, StepBytes bytes per head per step.
type Layout struct {
	Members   int
	StepBytes int
}

// The counters of a member, in the order of its three lines.
const (
	Posted  = iota // steps whose input the member has scattered
	Reduced        // steps whose share the member has ld_reduced and st'd
	Done           // steps the member has finished: their slots are free
)

const ctrOff = wire.LineBytes

// SlotBytes = Members x StepBytes: one step's slot of a member's up or down buffer, a step per
// head (nHeads = localRanks in one node, ncclNvlsBufferSetup).
func (l Layout) SlotBytes() int { return l.Members * l.StepBytes }

// BufferBytes = NCCL_STEPS x SlotBytes: a member's up or down buffer (NCCL's buffSize =
// nvlsChunkSize x NCCL_STEPS per head).
func (l Layout) BufferBytes() int { return wire.NCCLSteps * l.SlotBytes() }

// Size = 128 x (1 + 3 Members) + 2 x Members x BufferBytes: the region's bytes (a layout line and
// three counter lines per member, then every member's up and down buffers).
func (l Layout) Size() int { return l.dataOff() + 2*l.Members*l.BufferBytes() }

// UpOffset = 128 x (1 + 3 Members) + 2m x BufferBytes: the byte offset of member m's up buffer.
func (l Layout) UpOffset(m int) int { return l.dataOff() + 2*m*l.BufferBytes() }

// DownOffset = UpOffset(m) + BufferBytes: the byte offset of member m's down buffer.
func (l Layout) DownOffset(m int) int { return l.UpOffset(m) + l.BufferBytes() }

// CounterOffset = 128 x (1 + 3m + k): the byte offset of member m's counter k (Posted, Reduced,
// Done), a 64-bit word alone in its 128-byte line.
func (l Layout) CounterOffset(m, k int) int { return ctrOff + (3*m+k)*wire.LineBytes }

// Word is the layout word at the region's line 0: "nvls", Members and StepBytes, which every
// member checks when it maps the region.
func (l Layout) Word() uint64 {
	return wire.LayoutWord("nvls", uint64(l.Members), uint64(l.StepBytes))
}

func (l Layout) dataOff() int { return ctrOff + 3*l.Members*wire.LineBytes }
