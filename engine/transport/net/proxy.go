package net

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/collplan/collplan/engine/internal/wire"
)

// link is the TCP socket between this host and one other. Only the poller writes it; only the
// link's reader reads it.
type link struct {
	host      int
	socks     []*sock // 0: the control socket; 1..: data sockets (Setup.Sockets)
	lastSend  time.Time
	lastProbe time.Time
	dirty     bool
	dead      bool

	// the poller's side
	cur      *sock     // the socket last written (put)
	wnext    int       // the data socket of the next striped piece written
	deadline time.Time // this pass's write deadline
	stamp    int64     // this pass's send time (Unix ns), in every header
	werr     error     // the first write error of this pass

	rnext int    // the reader's side: the data socket of the next striped piece read
	bye   uint64 // the goodbye's value: the far rank process's state word (procs.go; 0 from a Host)

	left     atomic.Bool   // the far end said a clean goodbye: a write that then fails loses nothing (fail)
	readDone chan struct{} // closed when the link's reader returns (writeFailed)
}

// Frame kinds. Every frame is a 40-byte header {kind u8, pad 3, ch u32, from u32, to u32, off u32,
// n u32, val u64, sent i64 (the sending pass's clock, Unix ns: Setup.Delay)} on the control
// socket and n payload bytes, striped over the data sockets past InlineBytes (stripe).
const (
	fLL         = 1 + iota // n bytes of whole LL lines (flags included) at off of connection (ch, from, to)
	fLL128                 // n bytes of whole LL128 lines at off: the far side stores each line's flag last
	fSimple                // n bytes of a Simple slot at off, then tail = val
	fHead                  // head = val (credits back to the sender's copy)
	fCtrl                  // one 128-byte control line of rank from at off of "ctrl"
	fAbort                 // the abort word val
	fPing                  // heartbeat
	fBye                   // a clean close
	fProbe                 // one byte on each data socket in turn: a lost idle data socket shows too
	headerBytes = 40
)

func (l *link) frame(kind int, k connKey, off, n int, val uint64) {
	var b [headerBytes]byte
	b[0] = byte(kind)
	binary.LittleEndian.PutUint32(b[4:], k.ch)
	binary.LittleEndian.PutUint32(b[8:], k.from)
	binary.LittleEndian.PutUint32(b[12:], k.to)
	binary.LittleEndian.PutUint32(b[16:], uint32(off))
	binary.LittleEndian.PutUint32(b[20:], uint32(n))
	binary.LittleEndian.PutUint64(b[24:], val)
	binary.LittleEndian.PutUint64(b[32:], uint64(l.stamp))
	l.put(l.socks[0], b[:])
}

// poll is the proxy of every cross-host connection and control line of this host: it forwards
// what local senders completed, the heads local receivers published, the local ranks' control
// lines and the abort word. It spins (yielding) while there is work and for h.idlePasses empty
// passes, then sleeps 20 us doubling to 500 us until something moves.
func (h *Host) poll() {
	defer h.done.Done()
	idle := 0
	var scratch []byte
	for {
		stopping := false
		select {
		case <-h.stop:
			stopping = true
		default:
		}
		now := time.Now()
		for _, l := range h.links {
			if l != nil {
				l.deadline, l.stamp = now.Add(h.s.Timeout), now.UnixNano()
			}
		}
		moved := h.pass(&scratch, now.UnixNano())
		for _, l := range h.links {
			if l == nil || l.dead {
				continue
			}
			if stopping {
				l.frame(fBye, connKey{}, 0, 0, h.byeWord())
			} else if now.Sub(l.lastSend) > h.s.Timeout/4 {
				l.frame(fPing, connKey{}, 0, 0, 0)
			}
			if !stopping && len(l.socks) > 1 && now.Sub(l.lastProbe) > h.s.Timeout/4 {
				// The reader takes a data socket only when a striped piece is due on it, so a
				// data socket that carries nothing for a while is probed, busy link or not.
				l.frame(fProbe, connKey{}, 0, 0, 0)
				for _, s := range l.socks[1:] {
					l.put(s, []byte{0})
				}
				l.lastProbe = now
			}
			if l.dirty {
				l.flushCur()
				if err := l.werr; err != nil {
					l.dead = true
					if !stopping {
						h.writeFailed(l, err)
					}
				}
				l.dirty, l.lastSend = false, now
				for _, s := range l.socks {
					s.armed = false
				}
			}
		}
		if stopping {
			return
		}
		if moved {
			idle = 0
			continue
		}
		idle++
		if idle < h.idlePasses {
			runtime.Gosched()
			continue
		}
		// A frame the reader applies wakes the poller at once: the local rank it unblocked will
		// answer, and a poller deep in its back-off would add up to 500 us to every hop (with
		// Setup.Delay, every hop found it asleep).
		wait := time.NewTimer(min(20*time.Microsecond<<min(idle-h.idlePasses, 5), 500*time.Microsecond))
		select {
		case <-h.wake:
		case <-wait.C:
		}
		wait.Stop()
	}
}

// pass forwards everything that changed since the last pass (now: its clock, Unix ns); it
// reports whether anything did.
func (h *Host) pass(scratch *[]byte, now int64) bool {
	moved := h.passCtrl(now)
	h.mu.Lock()
	list := h.list
	h.mu.Unlock()
	for _, c := range list {
		if c.peer == nil || c.peer.dead {
			continue
		}
		if c.sender {
			if h.forward(c, scratch) {
				moved = true
			}
			continue
		}
		if hd := atomic.LoadUint64(wire.WordAt(c.r, wire.ConnHeadOffset)); hd != c.headSent {
			c.peer.frame(fHead, c.key, 0, 0, hd)
			c.headSent, moved = hd, true
		}
	}
	// The race detector cannot see the orderings that run through the sockets (a receiver read a
	// slot, published head, the far sender rewrote the slot, this host's reader stores it): the
	// poller's loads above are released here and acquired by the readers before they store.
	wire.RaceReleaseMerge(unsafe.Pointer(&h.raceSync))
	return moved
}

// passCtrl mirrors this host's ranks' control lines (state/beat/waits-for, the two descriptors)
// and the abort word to every other host. A descriptor's seq is read first: the words read after
// it are that call's or newer, and the far side stores seq last.
//
// Line 0 goes out at once when its state word changed, and otherwise at most every beatLag: its
// other words are the watchdog's beat and "waits for", which only a watchdog that fires reads
// (wire's StalledRank, after a wait of Config.Timeout, counting a rank stale after at least
// 300 ms), while a parked wait changes "waits for" at every sleep. Sent each time, they were
// half of all frames across 8 emulated hosts (a line to each of 7 hosts, about once per call
// per rank, beside one data frame and one credit).
func (h *Host) passCtrl(now int64) bool {
	moved := false
	first, last := h.endRanks(h.self())
	for r := first; r < last; r++ {
		for ln := 0; ln < 3; ln++ {
			off := wire.CtrlRankOffset + r*wire.CtrlRankSize + ln*wire.LineBytes
			changed := false
			if ln > 0 && atomic.LoadUint64(wire.WordAt(h.ctrl, off)) == h.lastCtrl[off/8] {
				continue // a descriptor: its words change only with its seq, stored after them
			}
			if ln == 0 && atomic.LoadUint64(wire.WordAt(h.ctrl, off)) == h.lastCtrl[off/8] && now-h.beatSent[r] < h.beatLag.Load() {
				continue
			}
			for i := 0; i < wire.LineBytes/8; i++ {
				v := atomic.LoadUint64(wire.WordAt(h.ctrl, off+8*i))
				if v != h.lastCtrl[off/8+i] {
					h.lastCtrl[off/8+i], changed = v, true
				}
			}
			if !changed {
				continue
			}
			moved = true
			if ln == 0 {
				h.beatSent[r] = now
			}
			var b [wire.LineBytes]byte
			for i := 0; i < wire.LineBytes/8; i++ {
				binary.LittleEndian.PutUint64(b[8*i:], h.lastCtrl[off/8+i])
			}
			for _, l := range h.links {
				if l != nil && !l.dead && h.mirrorsTo(l.host) {
					l.frame(fCtrl, connKey{from: uint32(r)}, off, wire.LineBytes, 0)
					l.putPayload(b[:], h.chunk())
					h.ctrlSent.Add(1)
				}
			}
		}
	}
	if !h.abortOut {
		if v := atomic.LoadUint64(wire.WordAt(h.ctrl, wire.CtrlAbortOffset)); v != 0 {
			h.abortOut, moved = true, true
			for _, l := range h.links {
				if l != nil && !l.dead {
					l.frame(fAbort, connKey{}, 0, 0, v)
				}
			}
		}
	}
	return moved
}

// geometry of one connection's buffers (layout.go).
type geometry struct {
	llOff, ll128Off, simOff         int
	llLines, ll128Lines, simpleSlot int
}

func (h *Host) geometry() geometry {
	l := h.s.Layout
	g := geometry{llOff: wire.ConnBufOffset}
	g.ll128Off = g.llOff + l.LLBytes
	g.simOff = g.ll128Off + l.LL128Bytes
	g.llLines = l.LLBytes / wire.NCCLSteps / wire.LLLineBytes
	g.ll128Lines = l.LL128Bytes / wire.NCCLSteps / wire.LL128LineBytes
	g.simpleSlot = l.SimpleBytes / wire.NCCLSteps
	return g
}

func (g geometry) llLine(s uint64, k int) int {
	return g.llOff + (int(s%wire.NCCLSteps)*g.llLines+k)*wire.LLLineBytes
}

func (g geometry) ll128Line(s uint64, k int) int {
	return g.ll128Off + (int(s%wire.NCCLSteps)*g.ll128Lines+k)*wire.LL128LineBytes
}

// llDone: LL line k of step s is complete when both 8-byte halves carry flag uint32(s+1).
func (g geometry) llDone(r []byte, s uint64, k int) bool {
	if k >= g.llLines {
		return false
	}
	o, f := g.llLine(s, k), uint32(s+1)
	return uint32(atomic.LoadUint64(wire.WordAt(r, o))>>32) == f && uint32(atomic.LoadUint64(wire.WordAt(r, o+8))>>32) == f
}

// ll128Done: LL128 line k of step s is complete when its flag word is s+1 (an acquire load: the
// 120 bytes before it are then in).
func (g geometry) ll128Done(r []byte, s uint64, k int) bool {
	if k >= g.ll128Lines {
		return false
	}
	return atomic.LoadUint64(wire.WordAt(r, g.ll128Line(s, k)+wire.LL128FlagOffset)) == s+1
}

// simpleDone reports whether step s was published as a Simple step: the tail passed s and the
// slot's size word carries s (wire's PublishSimple). The tail alone would also pass s after an
// empty LL or LL128 step s and a Simple step after it.
func (g geometry) simpleDone(r []byte, s uint64) bool {
	if atomic.LoadUint64(wire.WordAt(r, wire.ConnTailOffset)) <= s {
		return false
	}
	_, ok := wire.SimpleSize(r, s)
	return ok
}

// later reports whether the sender has started a step after s (a later slot's first line shows
// its flag, or the Simple tail passed s+1): step s then has all its lines in.
func (g geometry) later(r []byte, s uint64) bool {
	if atomic.LoadUint64(wire.WordAt(r, wire.ConnTailOffset)) > s+1 {
		return true
	}
	for j := uint64(1); j < wire.NCCLSteps; j++ {
		if g.llDone(r, s+j, 0) || g.ll128Done(r, s+j, 0) {
			return true
		}
	}
	return false
}

// forward sends what the local sender of c completed since the last pass, step by step in order.
func (h *Host) forward(c *conn, scratch *[]byte) bool {
	g := h.geometry()
	moved := false
	for {
		s := c.step
		if c.mode == 0 {
			switch {
			case g.llDone(c.r, s, 0):
				c.mode, c.line = modeLL, 0
			case g.ll128Done(c.r, s, 0):
				c.mode, c.line = modeLL128, 0
			case g.simpleDone(c.r, s):
				// Simple: the step's bytes, as the sender's size word says.
				off := g.simOff + int(s%wire.NCCLSteps)*g.simpleSlot
				nb, _ := wire.SimpleSize(c.r, s)
				nb = min(max(nb, 0), g.simpleSlot)
				c.peer.frame(fSimple, c.key, off, nb, s+1)
				c.peer.putPayload(c.r[off:off+nb], h.chunk())
				h.sentBytes.Add(int64(nb))
				c.step++
				moved = true
				continue
			case g.later(c.r, s):
				// Step s may have been published between the checks above and this one: the
				// sender can publish s and a later step while this pass is descheduled, and
				// skipping s as empty then loses it (the far tail jumped s to s+2, and the far
				// receiver read step s-8's bytes: TestCollectivesAcrossHosts under load).
				if g.llDone(c.r, s, 0) || g.ll128Done(c.r, s, 0) || g.simpleDone(c.r, s) {
					continue // it came in meanwhile
				}
				c.step++ // an empty step
				moved = true
				continue
			default:
				return moved
			}
		}
		done, lines, lineBytes, at := g.llDone, g.llLines, wire.LLLineBytes, g.llLine
		if c.mode == modeLL128 {
			done, lines, lineBytes, at = g.ll128Done, g.ll128Lines, wire.LL128LineBytes, g.ll128Line
		}
		k := c.line
		for k < lines && done(c.r, s, k) {
			k++
		}
		ended := k == lines
		if !ended && g.later(c.r, s) {
			for k < lines && done(c.r, s, k) {
				k++
			}
			ended = true
		}
		if k > c.line {
			off, n := at(s, c.line), (k-c.line)*lineBytes
			if c.mode == modeLL {
				// LL lines are read word by word (each half is one store by the sender).
				if cap(*scratch) < n {
					*scratch = make([]byte, n)
				}
				b := (*scratch)[:n]
				for i := 0; i < n; i += 8 {
					binary.LittleEndian.PutUint64(b[i:], atomic.LoadUint64(wire.WordAt(c.r, off+i)))
				}
				c.peer.frame(fLL, c.key, off, n, 0)
				c.peer.putPayload(b, h.chunk())
			} else {
				c.peer.frame(fLL128, c.key, off, n, 0)
				c.peer.putPayload(c.r[off:off+n], h.chunk())
			}
			h.sentBytes.Add(int64(n))
			c.line, moved = k, true
		}
		if !ended {
			return moved
		}
		c.step, c.mode, c.line = s+1, 0, 0
	}
}

// writeFailed is a write error on l's sockets. A far end that closed cleanly (its ranks done, its
// goodbye sent) resets the socket too, and its goodbye may still sit unread before the reset: the
// reader decides. The loss is declared once the reader has returned without a goodbye, or after
// writeGrace if the reader is still reading (a goodbye sent before the reset is read well within
// it; a data socket closed under an idle reader is found so). Failing
// at once made a host whose part of a call was done, and which closed, abort the hosts still in
// that call ("rank R: lost", TestCleanCloseWhileOthersFinish: 14 of 40 iterations).
func (h *Host) writeFailed(l *link, err error) {
	go func() {
		t := time.NewTimer(min(h.s.Timeout, writeGrace))
		defer t.Stop()
		select {
		case <-l.readDone:
		case <-t.C:
		case <-h.stop:
			return
		}
		h.fail(l.host, fmt.Errorf("write: %w", err))
	}()
}

// writeGrace bounds how long a write error waits for the link's reader (writeFailed).
const writeGrace = time.Second

// beatLag bounds how late a rank's beat and "waits for" reach the other hosts (passCtrl): well
// inside wire's staleness bound (300 ms at least) and beat period (100 ms).
const beatLag = 20 * time.Millisecond

// read applies the frames host l.host sends, until a goodbye, an error or Close.
func (h *Host) read(l *link) {
	defer h.readers.Done()
	defer close(l.readDone)
	err := h.readLoop(l)
	select {
	case <-h.stop:
		return // closing: the links are being closed under the reader
	default:
	}
	if errors.Is(err, errBye) {
		// A clean close is a loss too while one of that host's ranks is still open (its Comm
		// was not closed first): this host's ranks would wait for it forever.
		first, last := h.endRanks(l.host)
		for r := first; r < last; r++ {
			if h.stateAtBye(l, r)&1 == 0 {
				h.fail(l.host, fmt.Errorf("it closed its net transport while rank %d was open", r))
				return
			}
		}
		l.left.Store(true)
		return
	}
	if err != nil {
		h.fail(l.host, err)
	}
}

func (h *Host) readLoop(l *link) error {
	var b [headerBytes]byte
	var line [wire.LineBytes]byte
	var scratch []byte
	for {
		l.socks[0].c.SetReadDeadline(time.Now().Add(h.s.Timeout))
		if _, err := io.ReadFull(l.socks[0].r, b[:]); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if h.s.Delay > 0 {
			hold(int64(binary.LittleEndian.Uint64(b[32:])), h.s.Delay, h.parked)
		}
		kind := int(b[0])
		k := connKey{binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:]), binary.LittleEndian.Uint32(b[12:])}
		off, n := int(binary.LittleEndian.Uint32(b[16:])), int(binary.LittleEndian.Uint32(b[20:]))
		val := binary.LittleEndian.Uint64(b[24:])
		wire.RaceAcquire(unsafe.Pointer(&h.raceSync))
		if kind != fPing && kind != fProbe && kind != fCtrl {
			h.wakePoller()
		}
		quiet := false // a frame that can unblock no wait rings no bell
		switch kind {
		case fPing:
		case fProbe:
			var one [1]byte
			for i, s := range l.socks[1:] {
				s.c.SetReadDeadline(time.Now().Add(h.s.Timeout))
				if _, err := io.ReadFull(s.r, one[:]); err != nil {
					return fmt.Errorf("read socket %d (probe): %w", i+1, err)
				}
			}
		case fBye:
			l.bye = val
			return errBye
		case fAbort:
			atomic.CompareAndSwapUint64(wire.WordAt(h.ctrl, wire.CtrlAbortOffset), 0, val)
		case fCtrl:
			base := wire.CtrlRankOffset + int(k.from)*wire.CtrlRankSize
			if int(k.from) >= h.s.Ranks || h.endOf(int(k.from)) != l.host || n != wire.LineBytes || off < base || off >= base+wire.CtrlRankSize || off%wire.LineBytes != 0 {
				return fmt.Errorf("bad control frame (rank %d, offset %d, %d bytes)", k.from, off, n)
			}
			if err := h.checkApplier(int(k.from)); err != nil {
				return err
			}
			if err := l.readPayload(line[:], h.chunk(), h.s.Timeout); err != nil {
				return err
			}
			// Only line 0's state word and a descriptor's seq are waited for: a line 0 whose
			// state is unchanged carries the watchdog's beat and "waits for" (passCtrl).
			quiet = (off-base)/wire.LineBytes == 0 && binary.LittleEndian.Uint64(line[:]) == atomic.LoadUint64(wire.WordAt(h.ctrl, off))
			if !quiet {
				h.wakePoller()
			}
			// Words 1.. first, word 0 (a descriptor's seq; the state word) last with release.
			for i := wire.LineBytes/8 - 1; i >= 0; i-- {
				v := binary.LittleEndian.Uint64(line[8*i:])
				if i == 0 {
					wire.StoreRelease(wire.WordAt(h.ctrl, off), v)
				} else {
					atomic.StoreUint64(wire.WordAt(h.ctrl, off+8*i), v)
				}
			}
		case fLL, fLL128, fSimple, fHead:
			if h.HostOf(int(k.from)) == h.HostOf(int(k.to)) || (h.endOf(int(k.from)) != l.host && h.endOf(int(k.to)) != l.host) {
				return fmt.Errorf("frame for connection %s, which is not between %s and this one", k.name(), h.endName(l.host))
			}
			c, err := h.conn(k)
			if err != nil {
				return err
			}
			if err := h.apply(l, c, kind, off, n, val, &scratch); err != nil {
				return fmt.Errorf("%s: %w", k.name(), err)
			}
		default:
			return fmt.Errorf("unknown frame kind %d", kind)
		}
		if kind != fPing && kind != fProbe && !quiet {
			h.bell.ring() // after the stores: a parked wait that wakes finds them
		}
	}
}

// wakePoller ends the poller's back-off (poll): a frame applied most likely unblocked a local
// rank, which will answer.
func (h *Host) wakePoller() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// apply stores one data frame into the local copy with a local sender's ordering: LL words one
// 8-byte store each (flag inside), LL128 lines payload then flag (release), Simple payload then
// tail (release); head is one release store.
func (h *Host) apply(l *link, c *conn, kind, off, n int, val uint64, scratch *[]byte) error {
	g := h.geometry()
	lo, hi, unit := 0, 0, 1
	switch kind {
	case fHead:
		if !c.sender {
			return errors.New("credit frame at the receiver's host")
		}
		wire.StoreRelease(wire.WordAt(c.r, wire.ConnHeadOffset), val)
		return nil
	case fLL:
		lo, hi, unit = g.llOff, g.ll128Off, wire.LLLineBytes
	case fLL128:
		lo, hi, unit = g.ll128Off, g.simOff, wire.LL128LineBytes
	case fSimple:
		lo, hi = g.simOff, len(c.r)
	}
	if c.sender || off < lo || n < 0 || off+n > hi || (off-lo)%unit != 0 || n%unit != 0 {
		return fmt.Errorf("frame kind %d at offset %d, %d bytes, outside its buffer", kind, off, n)
	}
	if kind == fSimple {
		// The receiver reads the slot only after the tail says so.
		if err := l.readPayload(c.r[off:off+n], h.chunk(), h.s.Timeout); err != nil {
			return err
		}
		wire.StoreRelease(wire.WordAt(c.r, wire.ConnTailOffset), val)
		return nil
	}
	if cap(*scratch) < n {
		*scratch = make([]byte, n)
	}
	b := (*scratch)[:n]
	if err := l.readPayload(b, h.chunk(), h.s.Timeout); err != nil {
		return err
	}
	if kind == fLL {
		for i := 0; i < n; i += 8 {
			wire.StoreLL(wire.WordAt(c.r, off+i), binary.LittleEndian.Uint64(b[i:]))
		}
		return nil
	}
	for i := 0; i < n; i += wire.LL128LineBytes {
		dst := c.r[off+i : off+i+wire.LL128LineBytes]
		copy(dst[:wire.LL128LinePayload], b[i:])
		wire.StoreRelease(wire.WordAt(dst, wire.LL128FlagOffset), binary.LittleEndian.Uint64(b[i+wire.LL128FlagOffset:]))
	}
	return nil
}

// hold waits until a frame sent at sent (Unix ns, the far pass's clock) is delay old: the
// injected latency of Setup.Delay. The send time travels in the header rather than the delay
// counting from receipt, because the reader takes frames one after another: counted from when
// the reader got to each, a burst of k frames would wait k delays instead of one, and the knob
// would cut bandwidth instead of adding latency. The hosts' clocks must agree (emulated hosts
// share one kernel's clock); a hold is never longer than delay, whatever the stamp says.
//
// The last millisecond is spun (Gosched) where the host has a core to itself: Go's timers cannot
// wait less than a millisecond once a process is idle, and a thread sleeping in nanosleep woke
// 30-100 us late across 2 emulated hosts. Where the colocated hosts outnumber the cores (sleep),
// all but its last holdSpin is slept in nanosleep instead: eight hosts' readers spinning their
// holds took the 2 cores from the hops they held for (BENCHMARKS.md, "Quieter hosts").
func hold(sent int64, delay time.Duration, sleep bool) {
	until := time.Unix(0, sent).Add(delay)
	if lim := time.Now().Add(delay); until.After(lim) {
		until = lim
	}
	for {
		d := time.Until(until)
		if d <= 0 {
			return
		}
		if d > time.Millisecond {
			time.Sleep(d - 500*time.Microsecond) // a timer's lateness (tens of us) stays inside the rest
			continue
		}
		if sleep && d > holdSpin {
			threadSleep(d - holdSpin)
			continue
		}
		runtime.Gosched()
	}
}
