package engine

import (
	"encoding/binary"
	"sync/atomic"
)

// endpoint is one side of a connection: the view of the connection's region from its sender or its
// receiver, with that side's private step count. A step is one FIFO slot's worth of one message;
// slot = step mod NCCL_STEPS, the same for every protocol, and the count carries on across calls
// and protocols (like NCCL's conn->step), so the sender and the receiver stay in step as long as
// both run the same sequence of calls.
//
// Wire formats of one step (see layout.go for the region):
//   - Simple: the payload, then a release store of tail = step+1.
//   - LL: 16-byte lines {data 4 B, flag 4 B, data 4 B, flag 4 B}, each 8-byte half written with one
//     8-byte store (storeLL), flag = uint32(step+1); the receiver polls each half for its flag and
//     needs no tail and no fence. A partial last line is zero padded.
//   - LL128: 128-byte lines of 120 payload bytes, then a release store of the 8-byte flag
//     (step+1) in the line's last word; the receiver acquires the flag, then reads the payload.
//
// For every protocol the receiver publishes head = step+1 once it has consumed the step, and the
// sender waits for head > step-NCCL_STEPS before writing a slot: it never runs more than NCCL_STEPS
// steps ahead. Because flags are step numbers, a stale line always carries an older (smaller) flag
// than the one awaited, whichever protocol last used the slot; LL's 32-bit flag would only repeat
// after 2^32 steps on one connection (as NCCL's does).
type endpoint struct {
	head, tail *uint64
	ll         []uint64 // LL buffer as 8-byte half-lines
	ll128      []byte
	simple     []byte

	llSlotLines, ll128SlotLines, simpleSlot int

	step     uint64
	headSeen uint64 // the sender's last read of head: it rereads the line only when this is too old
	peer     int    // the rank at the other end: the one this side's waits wait for

	// Every rank's goroutines write their own endpoints (step, headSeen), and the endpoints of
	// ranks on other cores can be neighbours in memory: an endpoint spans whole cache lines (Go
	// places objects of a size class that is a multiple of 64 bytes on line boundaries), so that
	// no two share one. Adding peer made it 136 bytes, and in-process LL AllReduce at 16 MiB
	// measured about 13 % slower (paired medians) until this padding; TestEndpointLines keeps it.
	_ [56]byte
}

func newEndpoint(r []byte, l connLayout) *endpoint {
	off := connBufOff
	e := &endpoint{head: wordAt(r, connHeadOff), tail: wordAt(r, connTailOff)}
	e.ll = wordsOf(r[off : off+l.llBytes])
	off += l.llBytes
	e.ll128 = r[off : off+l.ll128Bytes]
	off += l.ll128Bytes
	e.simple = r[off : off+l.simpleBytes]
	e.llSlotLines = l.llBytes / NCCLSteps / llLineBytes
	e.ll128SlotLines = l.ll128Bytes / NCCLSteps / ll128LineBytes
	e.simpleSlot = l.simpleBytes / NCCLSteps
	return e
}

func (e *endpoint) slot() int { return int(e.step % NCCLSteps) }

// reserve waits until the sender may write its next step's slot (head > step-NCCL_STEPS).
func (e *endpoint) reserve(w *waiter) error {
	if e.step < NCCLSteps {
		return nil
	}
	need := e.step - NCCLSteps + 1
	if e.headSeen >= need {
		return nil
	}
	// The head line is written by the receiver at every step; reading it only when the cached
	// value no longer allows the step saves a cache-line transfer on most steps (NCCL's sender
	// keeps the same cache of connHead).
	if e.headSeen = atomic.LoadUint64(e.head); e.headSeen >= need {
		return nil
	}
	if err := w.waitGE(e.head, need, e.peer); err != nil {
		return err
	}
	e.headSeen = atomic.LoadUint64(e.head)
	return nil
}

// simpleSlotBytes is the first nb bytes of the current step's Simple slot.
func (e *endpoint) simpleSlotBytes(nb int) []byte {
	o := e.slot() * e.simpleSlot
	return e.simple[o : o+nb : o+nb]
}

// publishSimple ends a Simple send: the release store of the tail.
func (e *endpoint) publishSimple() {
	e.step++
	storeRelease(e.tail, e.step)
}

// waitSimple waits for the current step's Simple payload (tail > step) and returns its first nb
// bytes.
func (e *endpoint) waitSimple(w *waiter, nb int) ([]byte, error) {
	if atomic.LoadUint64(e.tail) <= e.step {
		if err := w.waitGE(e.tail, e.step+1, e.peer); err != nil {
			return nil, err
		}
	}
	return e.simpleSlotBytes(nb), nil
}

// release ends a receive: head = step+1, handing the slot back to the sender.
func (e *endpoint) release() {
	e.step++
	storeRelease(e.head, e.step)
}

// llLines is the number of LL lines nb payload bytes take.
func llLines(nb int) int { return (nb + llLinePayload - 1) / llLinePayload }

// ll128Lines is the number of LL128 lines nb payload bytes take.
func ll128Lines(nb int) int { return (nb + ll128LinePayload - 1) / ll128LinePayload }

// putLL writes src as the current step's LL lines and ends the send (no tail). The caller has
// reserved the slot.
func (e *endpoint) putLL(src []byte) {
	flag := uint64(uint32(e.step+1)) << 32
	words := e.ll[e.slot()*e.llSlotLines*2:]
	n := len(src) / llLinePayload
	for k := 0; k < n; k++ {
		d := src[llLinePayload*k : llLinePayload*k+llLinePayload]
		storeLL(&words[2*k], uint64(binary.LittleEndian.Uint32(d))|flag)
		storeLL(&words[2*k+1], uint64(binary.LittleEndian.Uint32(d[4:]))|flag)
	}
	if tail := src[llLinePayload*n:]; len(tail) > 0 {
		var d [llLinePayload]byte
		copy(d[:], tail)
		storeLL(&words[2*n], uint64(binary.LittleEndian.Uint32(d[:]))|flag)
		storeLL(&words[2*n+1], uint64(binary.LittleEndian.Uint32(d[4:]))|flag)
	}
	e.step++
}

// getLL reads the current step's LL lines into dst, polling every half-line for its flag. The
// caller releases the step afterwards.
func (e *endpoint) getLL(w *waiter, dst []byte) error {
	flag := uint32(e.step + 1)
	words := e.ll[e.slot()*e.llSlotLines*2:]
	n := len(dst) / llLinePayload
	var err error
	for k := 0; k < n; k++ {
		v1 := atomic.LoadUint64(&words[2*k])
		if uint32(v1>>32) != flag {
			if v1, err = w.waitLL(&words[2*k], flag, e.peer); err != nil {
				return err
			}
		}
		v2 := atomic.LoadUint64(&words[2*k+1])
		if uint32(v2>>32) != flag {
			if v2, err = w.waitLL(&words[2*k+1], flag, e.peer); err != nil {
				return err
			}
		}
		d := dst[llLinePayload*k : llLinePayload*k+llLinePayload]
		binary.LittleEndian.PutUint32(d, uint32(v1))
		binary.LittleEndian.PutUint32(d[4:], uint32(v2))
	}
	if tail := dst[llLinePayload*n:]; len(tail) > 0 {
		v1, err := w.waitLL(&words[2*n], flag, e.peer)
		if err != nil {
			return err
		}
		v2, err := w.waitLL(&words[2*n+1], flag, e.peer)
		if err != nil {
			return err
		}
		var d [llLinePayload]byte
		binary.LittleEndian.PutUint32(d[:], uint32(v1))
		binary.LittleEndian.PutUint32(d[4:], uint32(v2))
		copy(tail, d[:])
	}
	return nil
}

// putLL128 writes src as the current step's LL128 lines and ends the send (no tail): per line the
// payload, then the flag with a release store. The caller has reserved the slot.
func (e *endpoint) putLL128(src []byte) {
	flag := e.step + 1
	buf := e.ll128[e.slot()*e.ll128SlotLines*ll128LineBytes:]
	for off := 0; off < len(src); off += ll128LinePayload {
		line := buf[:ll128LineBytes:ll128LineBytes]
		buf = buf[ll128LineBytes:]
		copy(line[:ll128LinePayload], src[off:])
		storeRelease(wordAt(line, ll128FlagOff), flag)
	}
	e.step++
}

// getLL128 reads the current step's LL128 lines into dst: per line an acquire load of the flag,
// then the payload. The caller releases the step afterwards.
func (e *endpoint) getLL128(w *waiter, dst []byte) error {
	flag := e.step + 1
	buf := e.ll128[e.slot()*e.ll128SlotLines*ll128LineBytes:]
	for off := 0; off < len(dst); off += ll128LinePayload {
		line := buf[:ll128LineBytes:ll128LineBytes]
		buf = buf[ll128LineBytes:]
		if p := wordAt(line, ll128FlagOff); atomic.LoadUint64(p) != flag {
			if err := w.waitEq(p, flag, e.peer); err != nil {
				return err
			}
		}
		copy(dst[off:], line[:ll128LinePayload])
	}
	return nil
}
