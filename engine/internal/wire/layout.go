package wire

import (
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"unsafe"
)

// Region layouts. Every offset is a multiple of LineBytes, so each counter sits alone in its cache
// line (a writer on one side never invalidates the line the other side polls for another word).
//
// Connection region ("conn/C/FROM-TO"), written by sender FROM and receiver TO:
//
//	line 0      layout word: checks that both sides agree on the buffer sizes
//	line 1      head: steps the receiver has consumed (written by the receiver only)
//	line 2      tail: Simple steps the sender has published (written by the sender only;
//	            never written by LL or LL128), then NCCL_STEPS size words: slot k's byte count
//	            of its last Simple step, stored before the tail (for engine/transport/net's proxy)
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
	LineBytes = 128
	// NCCLSteps is NCCL_STEPS: the slots of a connection FIFO. A sender never runs more than
	// NCCLSteps steps ahead of its receiver.
	NCCLSteps = 8

	ConnHeadOffset = 1 * LineBytes
	ConnTailOffset = 2 * LineBytes
	ConnBufOffset  = 3 * LineBytes

	CtrlRankOffset = 2 * LineBytes // rank r's lines start at CtrlRankOffset + r*CtrlRankSize
	CtrlRankSize   = 3 * LineBytes

	layoutMagic = 0x636f6c6c706c616e // "collplan"
)

// CtrlAbortOffset is the byte offset of the abort word in the "ctrl" region (see AbortWord).
const CtrlAbortOffset = 1 * LineBytes

// LL and LL128 line geometry (NCCL's ncclLLFifoLine and the LL128 line).
const (
	LLLineBytes      = 16  // {data1, flag1, data2, flag2}, 4 bytes each
	LLLinePayload    = 8   // data bytes per LL line
	LL128LineBytes   = 128 // 15 data words and one flag word
	LL128LinePayload = 120
	LL128FlagOffset  = 120 // the flag is the line's last 8 bytes
)

// ConnLayout is the geometry of a connection region.
type ConnLayout struct {
	LLBytes, LL128Bytes, SimpleBytes int // whole buffers (NCCL_STEPS slots each)
}

// Size is the connection region's size in bytes.
func (l ConnLayout) Size() int { return ConnBufOffset + l.LLBytes + l.LL128Bytes + l.SimpleBytes }

// Word is the connection region's layout word.
func (l ConnLayout) Word() uint64 {
	return LayoutWord("conn", uint64(l.LLBytes), uint64(l.LL128Bytes), uint64(l.SimpleBytes))
}

// CtrlSize is the size of the control region of n ranks.
func CtrlSize(n int) int { return CtrlRankOffset + n*CtrlRankSize }

// LayoutWord is the magic xor a hash of what the two sides must agree on; never 0.
func LayoutWord(kind string, vals ...uint64) uint64 {
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

// ClaimLayout stores want in a region's layout word if it is still zero, or checks that the rank
// that got there first stored the same.
func ClaimLayout(r []byte, name string, want uint64) error {
	p := WordAt(r, 0)
	if atomic.CompareAndSwapUint64(p, 0, want) {
		return nil
	}
	if got := atomic.LoadUint64(p); got != want {
		return fmt.Errorf("%w: region %s was laid out for a different configuration (layout word %#x, want %#x)",
			ErrConfig, name, got, want)
	}
	return nil
}

// WordAt returns the 8-byte word at byte offset off of r, which must be 8-byte aligned (regions
// start at RegionAlign boundaries and every offset used is a multiple of 8).
func WordAt(r []byte, off int) *uint64 {
	if off < 0 || off+8 > len(r) {
		panic("engine: word outside its region")
	}
	return (*uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(r)), off))
}

// WordsOf returns b as 64-bit words; b is 8-byte aligned and a multiple of 8 bytes long.
func WordsOf(b []byte) []uint64 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}

// CheckRegion checks that a transport gave region name as asked: size bytes, aligned to
// RegionAlign.
func CheckRegion(r []byte, name string, size int) error {
	if len(r) != size {
		return fmt.Errorf("engine: transport gave region %s of %d bytes, want %d", name, len(r), size)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(r)))%RegionAlign != 0 {
		return fmt.Errorf("engine: transport gave region %s not aligned to %d bytes", name, RegionAlign)
	}
	return nil
}

// RegionAlign is the alignment every region must have: a cache line, as NCCL aligns its FIFOs.
const RegionAlign = 128

// CtrlRegion is the name of the communicator's control region.
const CtrlRegion = "ctrl"

// MaxChannels is the most channels a call runs on (NCCL's MAXCHANNELS).
const MaxChannels = 64
