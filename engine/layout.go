package engine

import (
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"unsafe"
)

// Region layouts. Every offset is a multiple of lineBytes, so each counter sits alone in its cache
// line (a writer on one side never invalidates the line the other side polls for another word).
//
// Connection region ("conn/C/FROM-TO"), written by sender FROM and receiver TO:
//
//	line 0      layout word: checks that both sides agree on the buffer sizes
//	line 1      head: steps the receiver has consumed (written by the receiver only)
//	line 2      tail: Simple steps the sender has published (written by the sender only;
//	            never written by LL or LL128)
//	line 3...   LL buffer    NCCL_STEPS slots of 16-byte lines {data 4 B, flag 4 B, data 4 B, flag 4 B}
//	            LL128 buffer NCCL_STEPS slots of 128-byte lines {data 120 B, flag 8 B}
//	            Simple buffer NCCL_STEPS slots of payload
//
// Control region ("ctrl"), written by every rank:
//
//	line 0        layout word: checks that every rank agrees on n and the configuration
//	line 1        abort word: 0, or who aborted the communicator and why
//	line 2+3r     rank r's state word (bit 0: closed), then its watchdog beat and "waits for"
//	              words (wait.go)
//	line 3+3r     rank r's call descriptor for even sequence numbers
//	line 4+3r     rank r's call descriptor for odd sequence numbers
const (
	lineBytes = 128
	// NCCLSteps is NCCL_STEPS: the slots of a connection FIFO. A sender never runs more than
	// NCCLSteps steps ahead of its receiver.
	NCCLSteps = 8

	connHeadOff = 1 * lineBytes
	connTailOff = 2 * lineBytes
	connBufOff  = 3 * lineBytes

	ctrlAbortOff = CtrlAbortOffset
	ctrlRankOff  = 2 * lineBytes
	ctrlRankSize = 3 * lineBytes

	layoutMagic = 0x636f6c6c706c616e // "collplan"
)

// CtrlAbortOffset is the byte offset of the abort word in the "ctrl" region (see AbortWord).
const CtrlAbortOffset = 1 * lineBytes

// LL and LL128 line geometry (NCCL's ncclLLFifoLine and the LL128 line).
const (
	llLineBytes      = 16  // {data1, flag1, data2, flag2}, 4 bytes each
	llLinePayload    = 8   // data bytes per LL line
	ll128LineBytes   = 128 // 15 data words and one flag word
	ll128LinePayload = 120
	ll128FlagOff     = 120 // the flag is the line's last 8 bytes
)

// connLayout is the geometry of a connection region.
type connLayout struct {
	llBytes, ll128Bytes, simpleBytes int // whole buffers (NCCL_STEPS slots each)
}

func (l connLayout) size() int { return connBufOff + l.llBytes + l.ll128Bytes + l.simpleBytes }

func (l connLayout) word() uint64 {
	return layoutWord("conn", uint64(l.llBytes), uint64(l.ll128Bytes), uint64(l.simpleBytes))
}

func ctrlSize(n int) int { return ctrlRankOff + n*ctrlRankSize }

// layoutWord is the magic xor a hash of what the two sides must agree on; never 0.
func layoutWord(kind string, vals ...uint64) uint64 {
	h := fnv.New64a()
	h.Write([]byte(kind))
	var b [8]byte
	for _, v := range vals {
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		h.Write(b[:])
	}
	w := layoutMagic ^ h.Sum64()
	if w == 0 {
		w = layoutMagic
	}
	return w
}

// claimLayout stores want in a region's layout word if it is still zero, or checks that the rank
// that got there first stored the same.
func claimLayout(r []byte, name string, want uint64) error {
	p := wordAt(r, 0)
	if atomic.CompareAndSwapUint64(p, 0, want) {
		return nil
	}
	if got := atomic.LoadUint64(p); got != want {
		return fmt.Errorf("%w: region %s was laid out for a different configuration (layout word %#x, want %#x)",
			ErrConfig, name, got, want)
	}
	return nil
}

// wordAt returns the 8-byte word at byte offset off of r, which must be 8-byte aligned (regions
// start at RegionAlign boundaries and every offset used is a multiple of 8).
func wordAt(r []byte, off int) *uint64 {
	if off < 0 || off+8 > len(r) {
		panic("engine: word outside its region")
	}
	return (*uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(r)), off))
}

// wordsOf returns b as 64-bit words; b is 8-byte aligned and a multiple of 8 bytes long.
func wordsOf(b []byte) []uint64 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}

func checkRegion(r []byte, name string, size int) error {
	if len(r) != size {
		return fmt.Errorf("engine: transport gave region %s of %d bytes, want %d", name, len(r), size)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(r)))%RegionAlign != 0 {
		return fmt.Errorf("engine: transport gave region %s not aligned to %d bytes", name, RegionAlign)
	}
	return nil
}

// The wire layout, exported for other implementations of the same formats (the CUDA kernels'
// generated header kernels/cuda/layout_gen.h): the same values as the constants above, so that
// the two cannot drift.
const (
	LineBytes        = lineBytes        // a counter's line: every region offset is a multiple
	ConnHeadOffset   = connHeadOff      // the head word of a connection region
	ConnTailOffset   = connTailOff      // the tail word (Simple only)
	ConnBufOffset    = connBufOff       // the LL buffer, then the LL128 and Simple buffers
	LLLineBytes      = llLineBytes      // {data 4 B, flag 4 B, data 4 B, flag 4 B}
	LLLinePayload    = llLinePayload    // data bytes per LL line
	LL128LineBytes   = ll128LineBytes   // 15 data words and one flag word
	LL128LinePayload = ll128LinePayload // data bytes per LL128 line
	LL128FlagOffset  = ll128FlagOff     // the flag word's offset in an LL128 line
)
