//go:build linux

package net

import (
	"io"
	stdnet "net"
	"runtime"
	"syscall"
	"time"
)

// setUserTimeout sets TCP_USER_TIMEOUT (18): unacknowledged data for this long ends the socket
// with an error, so a dead link is noticed even while the sender's buffer is not full.
func setUserTimeout(c *stdnet.TCPConn, d time.Duration) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, 18, int(d.Milliseconds()))
	})
}

// spinReader reads a link's socket without parking the reader goroutine in Go's network poller
// while data may come soon: it tries a read at once, and on EAGAIN yields (runtime.Gosched) and
// tries again for up to spin, then falls back to the connection's own Read (a netpoller wait that
// honours the read deadline). The engine's waits yield the same way for a millisecond before they
// sleep; while every goroutine of a host process yields, Go's scheduler always finds one to run and
// polls the network only when it runs out, so a reader parked in the poller woke a millisecond or
// more after its data came (an 8-byte AllReduce across two emulated hosts took 1.3 ms, one rank per
// host). Reads here go to a buffer the bufio.Reader owns, one at a time.
type spinReader struct {
	c    *stdnet.TCPConn
	raw  syscall.RawConn
	spin time.Duration

	// One read's buffer and result, and the function raw.Read calls, made once: a closure made
	// per Read escaped to the heap, an allocation per try (2 % of a host process's samples, and
	// the garbage collector's work beside it).
	p    []byte
	n    int
	rerr error
	try  func(fd uintptr) bool
}

func newSpinReader(c stdnet.Conn, spin time.Duration) io.Reader {
	tc, ok := c.(*stdnet.TCPConn)
	if !ok || spin <= 0 {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	r := &spinReader{c: tc, raw: raw, spin: spin}
	r.try = func(fd uintptr) bool {
		r.n, r.rerr = syscall.Read(int(fd), r.p)
		return true // never wait in the poller here
	}
	return r
}

// spinClockTries: the reader reads the clock every this many failed tries (a clock read costs
// about as much as the try's system call in a VM).
const spinClockTries = 8

func (r *spinReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var start time.Time
	for i := 0; ; i++ {
		r.p = p
		err := r.raw.Read(r.try)
		n, rerr := r.n, r.rerr
		r.p, r.rerr = nil, nil
		if err != nil {
			return 0, err
		}
		switch {
		case rerr == nil && n > 0:
			return n, nil
		case rerr == nil:
			return 0, io.EOF
		case rerr != syscall.EAGAIN && rerr != syscall.EINTR:
			return 0, rerr
		}
		switch {
		case start.IsZero():
			start = time.Now()
		case i%spinClockTries == 0 && time.Since(start) > r.spin:
			return r.c.Read(p)
		}
		runtime.Gosched()
	}
}

// holdSpin is how much of a hold is spun (runtime.Gosched) after its sleep (threadSleep): the
// wake-up's own lateness, with the thread's timer slack set to 1 us.
const holdSpin = 20 * time.Microsecond

// threadSleep blocks the calling thread in nanosleep for d, with its timer slack (50 us by
// default, by which the kernel may defer the wake-up to batch timers) set to 1 us first. Go's own
// timers cannot wait less than a millisecond once a process is idle: its poller's epoll_wait
// takes milliseconds. An interrupted sleep returns early; hold's loop sleeps or spins again.
func threadSleep(d time.Duration) {
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1000, 0)
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Nanosleep(&ts, nil)
}

// prSetTimerSlack is PR_SET_TIMERSLACK (linux/prctl.h).
const prSetTimerSlack = 29
