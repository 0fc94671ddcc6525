package wire

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// Endpoint is one side of a connection: the view of the connection's region from its sender or its
// receiver, with that side's private step count. A step is one FIFO slot's worth of one message;
// slot = step mod NCCL_STEPS, the same for every protocol, and the count carries on across calls
// and protocols (like NCCL's conn->step), so the sender and the receiver stay in step as long as
// both run the same sequence of calls.
//
// Wire formats of one step (see layout.go for the region):
//   - Simple: the payload, then a release store of tail = step+1.
//   - LL: 16-byte lines {data 4 B, flag 4 B, data 4 B, flag 4 B}, each 8-byte half written with one
//     8-byte store (StoreLL), flag = uint32(step+1); the receiver polls each half for its flag and
//     needs no tail and no fence. A partial last line is zero padded.
//   - LL128: 128-byte lines of 120 payload bytes, then a release store of the 8-byte flag
//     (step+1) in the line's last word; the receiver acquires the flag, then reads the payload.
//
// For every protocol the receiver publishes head = step+1 once it has consumed the step, and the
// sender waits for head > step-NCCL_STEPS before writing a slot: it never runs more than NCCL_STEPS
// steps ahead. Because flags are step numbers, a stale line always carries an older (smaller) flag
// than the one awaited, whichever protocol last used the slot; LL's 32-bit flag would only repeat
// after 2^32 steps on one connection (as NCCL's does).
type Endpoint struct {
	head, tail *uint64
	ll         []uint64 // LL buffer as 8-byte half-lines
	ll128      []byte
	simple     []byte

	llSlotLines, ll128SlotLines, simpleSlot int

	Step     uint64
	headSeen uint64 // the sender's last read of head: it rereads the line only when this is too old
	Peer     int    // the rank at the other end: the one this side's waits wait for
	simpleNb int    // the nb of the last SimpleSlotBytes: the byte count PublishSimple records

	// Every rank's goroutines write their own endpoints (step, headSeen), and the endpoints of
	// ranks on other cores can be neighbours in memory: an endpoint spans whole cache lines (Go
	// places objects of a size class that is a multiple of 64 bytes on line boundaries), so that
	// no two share one. Adding peer made it 136 bytes, and in-process LL AllReduce at 16 MiB
	// measured about 13 % slower (paired medians) until this padding; TestEndpointLines keeps it.
	_ [48]byte
}

// NewEndpoint returns a side of the connection whose region is r, laid out as l; the caller sets
// Peer.
func NewEndpoint(r []byte, l ConnLayout) *Endpoint {
	off := ConnBufOffset
	e := &Endpoint{head: WordAt(r, ConnHeadOffset), tail: WordAt(r, ConnTailOffset)}
	e.ll = WordsOf(r[off : off+l.LLBytes])
	off += l.LLBytes
	e.ll128 = r[off : off+l.LL128Bytes]
	off += l.LL128Bytes
	e.simple = r[off : off+l.SimpleBytes]
	e.llSlotLines = l.LLBytes / NCCLSteps / LLLineBytes
	e.ll128SlotLines = l.LL128Bytes / NCCLSteps / LL128LineBytes
	e.simpleSlot = l.SimpleBytes / NCCLSteps
	return e
}

func (e *Endpoint) slot() int { return int(e.Step % NCCLSteps) }

// Reserve waits until the sender may write its next step's slot (head > step-NCCL_STEPS).
func (e *Endpoint) Reserve(w *Waiter) error {
	if e.Step < NCCLSteps {
		return nil
	}
	need := e.Step - NCCLSteps + 1
	if e.headSeen >= need {
		return nil
	}
	// The head line is written by the receiver at every step; reading it only when the cached
	// value no longer allows the step saves a cache-line transfer on most steps (NCCL's sender
	// keeps the same cache of connHead).
	if e.headSeen = atomic.LoadUint64(e.head); e.headSeen >= need {
		return nil
	}
	if err := w.WaitGE(e.head, need, e.Peer); err != nil {
		return err
	}
	e.headSeen = atomic.LoadUint64(e.head)
	return nil
}

// SimpleSlotBytes is the first nb bytes of the current step's Simple slot.
func (e *Endpoint) SimpleSlotBytes(nb int) []byte {
	o := e.slot() * e.simpleSlot
	e.simpleNb = nb
	return e.simple[o : o+nb : o+nb]
}

// PublishSimple ends a Simple send: the step's number (low 32 bits) and byte count (the nb of the
// sender's last SimpleSlotBytes, which every sender calls for the slot it fills) into the slot's
// size word of the tail line, a plain store, then the release store of the tail. The size word is
// for a proxy that copies the slot to another host (engine/transport/net); receivers know their nb.
// The step number tells the proxy that step s itself was a Simple step: the tail alone does not
// (steps count across protocols, and an empty LL step s followed by a Simple step s+1 leaves the
// tail at s+2 too).
func (e *Endpoint) PublishSimple() {
	*(*uint64)(unsafe.Add(unsafe.Pointer(e.tail), 8*(1+e.slot()))) = uint64(uint32(e.Step))<<32 | uint64(uint32(e.simpleNb))
	e.Step++
	StoreRelease(e.tail, e.Step)
}

// SimpleSize returns the byte count the sender published for step s's Simple slot in connection
// region r, and whether step s was published as a Simple step at all (its size word carries s);
// valid once the tail passed s.
func SimpleSize(r []byte, s uint64) (int, bool) {
	w := atomic.LoadUint64(WordAt(r, ConnTailOffset+8*(1+int(s%NCCLSteps))))
	return int(uint32(w)), uint32(w>>32) == uint32(s)
}

// WaitSimple waits for the current step's Simple payload (tail > step) and returns its first nb
// bytes.
func (e *Endpoint) WaitSimple(w *Waiter, nb int) ([]byte, error) {
	if atomic.LoadUint64(e.tail) <= e.Step {
		if err := w.WaitGE(e.tail, e.Step+1, e.Peer); err != nil {
			return nil, err
		}
	}
	return e.SimpleSlotBytes(nb), nil
}

// Release ends a receive: head = step+1, handing the slot back to the sender.
func (e *Endpoint) Release() {
	e.Step++
	StoreRelease(e.head, e.Step)
}

// LLLines is the number of LL lines nb payload bytes take.
func LLLines(nb int) int { return (nb + LLLinePayload - 1) / LLLinePayload }

// LL128Lines is the number of LL128 lines nb payload bytes take.
func LL128Lines(nb int) int { return (nb + LL128LinePayload - 1) / LL128LinePayload }

// PutLL writes src as the current step's LL lines and ends the send (no tail). The caller has
// reserved the slot.
func (e *Endpoint) PutLL(src []byte) {
	flag := uint64(uint32(e.Step+1)) << 32
	words := e.ll[e.slot()*e.llSlotLines*2:]
	n := len(src) / LLLinePayload
	for k := 0; k < n; k++ {
		d := src[LLLinePayload*k : LLLinePayload*k+LLLinePayload]
		StoreLL(&words[2*k], uint64(binary.LittleEndian.Uint32(d))|flag)
		StoreLL(&words[2*k+1], uint64(binary.LittleEndian.Uint32(d[4:]))|flag)
	}
	if tail := src[LLLinePayload*n:]; len(tail) > 0 {
		var d [LLLinePayload]byte
		copy(d[:], tail)
		StoreLL(&words[2*n], uint64(binary.LittleEndian.Uint32(d[:]))|flag)
		StoreLL(&words[2*n+1], uint64(binary.LittleEndian.Uint32(d[4:]))|flag)
	}
	e.Step++
}

// GetLL reads the current step's LL lines into dst, polling every half-line for its flag. The
// caller releases the step afterwards.
func (e *Endpoint) GetLL(w *Waiter, dst []byte) error {
	flag := uint32(e.Step + 1)
	words := e.ll[e.slot()*e.llSlotLines*2:]
	n := len(dst) / LLLinePayload
	var err error
	for k := 0; k < n; k++ {
		v1 := atomic.LoadUint64(&words[2*k])
		if uint32(v1>>32) != flag {
			if v1, err = w.WaitLL(&words[2*k], flag, e.Peer); err != nil {
				return err
			}
		}
		v2 := atomic.LoadUint64(&words[2*k+1])
		if uint32(v2>>32) != flag {
			if v2, err = w.WaitLL(&words[2*k+1], flag, e.Peer); err != nil {
				return err
			}
		}
		d := dst[LLLinePayload*k : LLLinePayload*k+LLLinePayload]
		binary.LittleEndian.PutUint32(d, uint32(v1))
		binary.LittleEndian.PutUint32(d[4:], uint32(v2))
	}
	if tail := dst[LLLinePayload*n:]; len(tail) > 0 {
		v1, err := w.WaitLL(&words[2*n], flag, e.Peer)
		if err != nil {
			return err
		}
		v2, err := w.WaitLL(&words[2*n+1], flag, e.Peer)
		if err != nil {
			return err
		}
		var d [LLLinePayload]byte
		binary.LittleEndian.PutUint32(d[:], uint32(v1))
		binary.LittleEndian.PutUint32(d[4:], uint32(v2))
		copy(tail, d[:])
	}
	return nil
}

// PutLL128 writes src as the current step's LL128 lines and ends the send (no tail): per line the
// payload, then the flag with a release store. The caller has reserved the slot.
func (e *Endpoint) PutLL128(src []byte) {
	flag := e.Step + 1
	buf := e.ll128[e.slot()*e.ll128SlotLines*LL128LineBytes:]
	for off := 0; off < len(src); off += LL128LinePayload {
		line := buf[:LL128LineBytes:LL128LineBytes]
		buf = buf[LL128LineBytes:]
		copy(line[:LL128LinePayload], src[off:])
		StoreRelease(WordAt(line, LL128FlagOffset), flag)
	}
	e.Step++
}

// GetLL128 reads the current step's LL128 lines into dst: per line an acquire load of the flag,
// then the payload. The caller releases the step afterwards.
func (e *Endpoint) GetLL128(w *Waiter, dst []byte) error {
	flag := e.Step + 1
	buf := e.ll128[e.slot()*e.ll128SlotLines*LL128LineBytes:]
	for off := 0; off < len(dst); off += LL128LinePayload {
		line := buf[:LL128LineBytes:LL128LineBytes]
		buf = buf[LL128LineBytes:]
		if p := WordAt(line, LL128FlagOffset); atomic.LoadUint64(p) != flag {
			if err := w.WaitEq(p, flag, e.Peer); err != nil {
				return err
			}
		}
		copy(dst[off:], line[:LL128LinePayload])
	}
	return nil
}

// RecvReady reports whether the current step's payload is in (tail > step): WaitSimple would not
// wait.
func (e *Endpoint) RecvReady() bool { return atomic.LoadUint64(e.tail) > e.Step }

// SendReady reports whether the sender may write its next step's slot: Reserve would not wait.
func (e *Endpoint) SendReady() bool {
	if e.Step < NCCLSteps || e.headSeen >= e.Step-NCCLSteps+1 {
		return true
	}
	e.headSeen = atomic.LoadUint64(e.head)
	return e.headSeen >= e.Step-NCCLSteps+1
}
