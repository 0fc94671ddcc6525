package engine

import "github.com/collplan/collplan/engine/internal/wire"

// The wire layout, exported for other implementations of the same formats (the CUDA kernels'
// generated header kernels/cuda/layout_gen.h): the wire room's values (engine/internal/wire, whose
// layout.go draws the regions), so that the two cannot drift.
const (
	// NCCLSteps is NCCL_STEPS: the slots of a connection FIFO. A sender never runs more than
	// NCCLSteps steps ahead of its receiver.
	NCCLSteps = wire.NCCLSteps
	// CtrlAbortOffset is the byte offset of the abort word in the "ctrl" region (see AbortWord).
	CtrlAbortOffset = wire.CtrlAbortOffset

	LineBytes        = wire.LineBytes        // a counter's line: every region offset is a multiple
	ConnHeadOffset   = wire.ConnHeadOffset   // the head word of a connection region
	ConnTailOffset   = wire.ConnTailOffset   // the tail word (Simple only)
	ConnBufOffset    = wire.ConnBufOffset    // the LL buffer, then the LL128 and Simple buffers
	LLLineBytes      = wire.LLLineBytes      // {data 4 B, flag 4 B, data 4 B, flag 4 B}
	LLLinePayload    = wire.LLLinePayload    // data bytes per LL line
	LL128LineBytes   = wire.LL128LineBytes   // 15 data words and one flag word
	LL128LinePayload = wire.LL128LinePayload // data bytes per LL128 line
	LL128FlagOffset  = wire.LL128FlagOffset  // the flag word's offset in an LL128 line
)

// RegionAlign is the alignment every region must have (transport.RegionAlign).
const RegionAlign = wire.RegionAlign
