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
}

func newSpinReader(c stdnet.Conn, spin time.Duration) io.Reader {
	tc, ok := c.(*stdnet.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &spinReader{c: tc, raw: raw, spin: spin}
}

func (r *spinReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var start time.Time
	for {
		var n int
		var rerr error
		if err := r.raw.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), p)
			return true // never wait in the poller here
		}); err != nil {
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
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > r.spin {
			return r.c.Read(p)
		}
		runtime.Gosched()
	}
}
