package engine

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/kernels"
)

// Agreement. Every rank posts a descriptor of its call (collective, count, dtype, op, root, plan,
// and whether it found its arguments valid) in the control region, then starts moving data at
// once; the ranks check each other's descriptors while the data moves. The calling goroutine's
// worker reads the peers' descriptors while it waits for data (wire.Waiter.Idle), where the cache-line
// transfers cost nothing, and the call does not return before every rank's descriptor has been
// read and found equal to this rank's. So a call that disagrees anywhere ends with an error on
// every rank:
//   - a rank that completes its data path finds the difference when it checks at the end;
//   - a rank whose data path cannot complete (its peers run another protocol, count or
//     collective) waits, and its waits read the descriptors, find the difference, and end.
//
// The first rank to find a difference aborts the communicator (data of the disagreeing call may
// sit in the FIFOs, so the step counters of the connections can no longer be trusted), and every
// rank reports the same error, computed from all n descriptors: the first field, in descFields
// order, in which the lowest such rank differs from rank 0, or ErrRejected naming the lowest rank
// that found its own arguments invalid. The one disagreement that leaves the communicator usable
// is a call every rank found invalid: no rank moved any data.
//
// The 2-rank 8-byte AllReduce shows what this buys over a handshake before data (post, then wait
// for everyone's descriptor): that waited for the last rank to arrive before the first byte moved,
// and spent a quarter of the call in it.
//
// Descriptors alternate between two lines per rank by call parity. A rank posts call k+2 only
// after it has read every rank's descriptor of call k+1, which every rank posts only after it has
// read everyone's call k: no line is rewritten while a peer may still read it.

// Descriptor words: seq last, with a release store, so a peer that sees seq sees the rest.
const (
	dSeq   = iota
	dCall  // collective, dtype, op, algorithm, protocol, channels, status: see packCall
	dRoot  //
	dCount //
	dSizes // chunk bytes << 32 | step bytes
	descWords
)

// desc is a call descriptor, as posted.
type desc [descWords]uint64

// Fields of dCall.
const (
	dcColl     = 0  // 8 bits
	dcDtype    = 8  // 8 bits
	dcOp       = 16 // 16 bits
	dcAlgo     = 32 // 8 bits
	dcProto    = 40 // 8 bits
	dcChannels = 48 // 8 bits (at most MaxChannels)
	dcStatus   = 56 // 8 bits: 1 when the rank found its arguments invalid
)

// agreement is the state of the current call's agreement on this rank.
// The ranks below c.ctl.AgreeNext have been checked (the waits read it: wire's wait.go).
type agreement struct {
	seq  uint64
	mine desc
}

// describe returns this rank's descriptor of cl. A rank that found its arguments invalid
// (localErr) posts its collective, count, dtype, op and root and status 1, no plan.
func describe(cl *call, localErr error) desc {
	var d desc
	v := uint64(uint8(cl.coll))<<dcColl | uint64(uint8(cl.dt))<<dcDtype | uint64(uint16(cl.opKind))<<dcOp
	if localErr != nil {
		v |= 1 << dcStatus
	} else {
		p := cl.plan
		v |= uint64(uint8(p.Algo))<<dcAlgo | uint64(uint8(p.Proto))<<dcProto | uint64(uint8(p.Channels))<<dcChannels
		d[dSizes] = uint64(uint32(p.ChunkBytes))<<32 | uint64(uint32(p.SliceBytes))
	}
	d[dCall] = v
	d[dRoot] = uint64(int64(cl.root))
	d[dCount] = uint64(int64(cl.count))
	return d
}

// post starts the agreement on call seq: it stores this rank's descriptor.
func (c *Comm) post(seq uint64, d desc) {
	d[dSeq] = seq
	c.agree = agreement{seq: seq, mine: d}
	c.ctl.AgreeNext = 0
	m := c.desc[c.rank][seq%2]
	for i := dSeq + 1; i < descWords; i++ {
		m[i] = d[i] // published by the release store of seq
	}
	wire.StoreRelease(&m[dSeq], seq)
}

// posted returns rank p's descriptor of call seq, or ok false while p has not posted it.
func (c *Comm) posted(p int, seq uint64) (d desc, ok bool) {
	words := c.desc[p][seq%2]
	if atomic.LoadUint64(&words[dSeq]) != seq {
		return d, false
	}
	copy(d[:], words)
	d[dSeq] = seq
	return d, true
}

// agreePoll checks, in rank order, the descriptors of the current call that the peers have
// posted, and stops at the first rank that has not posted yet. It returns done once every rank
// has been checked, and the call's error (see disagreement) at the first difference. Only the
// goroutine running the call calls it.
func (c *Comm) agreePoll() (done bool, err error) {
	a := &c.agree
	for ; c.ctl.AgreeNext < c.n; c.ctl.AgreeNext++ {
		p := c.ctl.AgreeNext
		if p == c.rank {
			continue
		}
		d, ok := c.posted(p, a.seq)
		if !ok {
			if atomic.LoadUint64(c.state[p])&stateClosed != 0 {
				if w := atomic.LoadUint64(c.abort); w != 0 {
					return true, c.abortError(w) // Abort closes after aborting
				}
				// Stop this rank's other workers, and the peers waiting for this one.
				atomic.CompareAndSwapUint64(c.abort, 0, wire.AbortWord(p, abortPeer))
				return true, peerClosedErr(p)
			}
			return false, nil
		}
		if d != a.mine {
			return true, c.disagreement(abortDisagree)
		}
	}
	return true, nil
}

// agreeWait finishes the current call's agreement: it waits until every rank has posted and
// checks each descriptor.
func (c *Comm) agreeWait(w *wire.Waiter) error {
	for i := 0; ; i++ {
		done, err := c.agreePoll()
		if done {
			return err
		}
		if err := w.Idle(i, c.ctl.AgreeNext); err != nil {
			return err
		}
	}
}

// disagreeWait is how long disagreement waits for the descriptors of ranks that have not posted
// the call, before it reports from the ones that have (a rank that stopped calling).
const disagreeWait = 2 * time.Second

// disagreement is the error of a call on which the ranks disagree, the same on every rank: it
// waits (at most disagreeWait, and not past this rank's close or context) for every rank's
// descriptor and compares them all with rank 0's. It aborts the communicator with reason unless
// every rank found its arguments invalid (then no rank moved data). When all the descriptors this
// rank can read agree (it was woken by an abort for another call), it returns the abort's error.
func (c *Comm) disagreement(reason int) error {
	a := &c.agree
	all := make([]desc, c.n)
	have := make([]bool, c.n)
	deadline := time.Now().Add(disagreeWait)
	for p := 0; p < c.n; p++ {
		for i := 0; ; i++ {
			if all[p], have[p] = c.posted(p, a.seq); have[p] {
				break
			}
			if atomic.LoadUint64(c.state[p])&stateClosed != 0 || c.ctl.Closed.Load() || time.Now().After(deadline) {
				break
			}
			if i < 64 {
				runtime.Gosched()
			} else {
				time.Sleep(10 * time.Microsecond)
			}
		}
	}
	err, moved := judge(all, have)
	if err == nil {
		if w := atomic.LoadUint64(c.abort); w != 0 {
			return wire.AbortErr(w)
		}
		return fmt.Errorf("%w: communicator aborted while the ranks' descriptors could not be read", ErrMismatch)
	}
	if moved {
		c.setAbort(reason)
	}
	return err
}

// judge compares the posted descriptors (have[p]) with rank 0's, or with the lowest posted one
// when rank 0's is missing. It returns the first difference, in descFields order and then rank
// order, nil when they all agree; moved reports whether some posted rank had valid arguments (and
// so may have moved data).
func judge(all []desc, have []bool) (err error, moved bool) {
	ref := -1
	for p := range all {
		if have[p] {
			if ref < 0 {
				ref = p
			}
			moved = moved || all[p][dCall]>>dcStatus&0xff == 0
		}
	}
	if ref < 0 {
		return nil, false
	}
	for _, f := range descFields {
		want := f.get(all[ref])
		for p := range all {
			if !have[p] || p == ref {
				continue
			}
			if got := f.get(all[p]); got != want {
				if f.name == "status" {
					bad := p
					if want != 0 {
						bad = ref
					}
					return fmt.Errorf("%w (rank %d)", ErrRejected, bad), moved
				}
				return &MismatchError{Field: f.name, Rank: p, Got: f.format(got), Want: f.format(want)}, moved
			}
		}
	}
	return nil, moved
}

// descFields are the descriptor fields compared across ranks, in the order mismatches are
// reported: the call's arguments, then whether they were valid, then the plan.
var descFields = []struct {
	name   string
	get    func(desc) uint64
	format func(uint64) string
}{
	{"collective", callField(dcColl, 8), func(v uint64) string { return costmodel.Coll(v).String() }},
	{"count", func(d desc) uint64 { return d[dCount] }, func(v uint64) string { return fmt.Sprint(int64(v)) }},
	{"dtype", callField(dcDtype, 8), func(v uint64) string { return kernels.Dtype(v).String() }},
	{"op", callField(dcOp, 16), func(v uint64) string { return kernels.Op(v).String() }},
	{"root", func(d desc) uint64 { return d[dRoot] }, func(v uint64) string { return fmt.Sprint(int64(v)) }},
	{"status", callField(dcStatus, 8), nil},
	{"algorithm", callField(dcAlgo, 8), func(v uint64) string { return costmodel.Algo(v).String() }},
	{"protocol", callField(dcProto, 8), func(v uint64) string { return costmodel.Proto(v).String() }},
	{"channels", callField(dcChannels, 8), func(v uint64) string { return fmt.Sprint(v) }},
	{"chunk bytes", func(d desc) uint64 { return d[dSizes] >> 32 }, func(v uint64) string { return fmt.Sprint(v) }},
	{"step bytes", func(d desc) uint64 { return d[dSizes] & 0xffffffff }, func(v uint64) string { return fmt.Sprint(v) }},
}

func callField(shift, bits uint) func(desc) uint64 {
	return func(d desc) uint64 { return d[dCall] >> shift & (1<<bits - 1) }
}

func peerClosedErr(p int) error { return fmt.Errorf("%w (rank %d)", ErrPeerClosed, p) }

// abortError is the error of a wait that found the communicator aborted with word w: for a
// disagreement the call's own disagreement (the same on every rank), for a peer that closed without
// joining ErrPeerClosed, else an *AbortError.
func (c *Comm) abortError(w uint64) error {
	switch int(w & 0xff) {
	case abortDisagree:
		return c.disagreement(abortDisagree)
	case abortPeer:
		return peerClosedErr(int(w>>8) - 1)
	}
	return wire.AbortErr(w)
}
