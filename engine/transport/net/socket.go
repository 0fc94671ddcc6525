package net

import (
	"bufio"
	"fmt"
	"io"
	stdnet "net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// NCCL's socket net plugin (src/transport/net_socket.cc) facts the striping follows.
const (
	// MaxSockets is the most data sockets per pair of hosts (NCCL's MAX_SOCKETS).
	MaxSockets = 64
	// MaxSocketThreads is the most NCCL_SOCKET_NTHREADS (NCCL's MAX_THREADS).
	MaxSocketThreads = 16
	// MinChunkBytes is the smallest piece a payload is cut into for the data sockets (NCCL's
	// MIN_CHUNKSIZE, 64 KiB).
	MinChunkBytes = 64 << 10
	// InlineBytes: payloads up to this many bytes stay on the control socket with their header
	// (one control line; NCCL's socket plugin sends payloads up to 128 bytes inline on its
	// control socket too).
	InlineBytes = 128
)

// Environment variables of the network transport.
const (
	EnvSocketThreads  = "NCCL_SOCKET_NTHREADS"
	EnvSocksPerThread = "NCCL_NSOCKS_PERTHREAD"
	EnvDelay          = "COLLPLAN_NET_DELAY_US"
	EnvColocated      = "COLLPLAN_NET_COLOCATED"
	maxDelay          = time.Second
	maxColocated      = 1 << 16
)

// ColocatedFromEnv is COLLPLAN_NET_COLOCATED, how many host processes share this machine's cores
// (Setup.Colocated): unset or empty is 0 (this host has the machine); otherwise 0..65536.
func ColocatedFromEnv(lookup func(string) (string, bool)) (int, error) {
	v, ok := lookup(EnvColocated)
	if !ok || strings.TrimSpace(v) == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > maxColocated {
		return 0, fmt.Errorf("%s=%q: want a whole number of host processes, 0..%d", EnvColocated, v, maxColocated)
	}
	return n, nil
}

// SocketsFromEnv is the number of data sockets per pair of hosts,
// NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD, with NCCL's defaults where a variable is unset
// or -2 (auto): 0 threads (NCCL's automatic choice on any NIC but AWS's and GCP's, whose vendor
// ids this package does not read) and 1 socket per thread. So by default there are no data
// sockets and every payload goes on the control socket, as in NCCL. A value that is not an
// integer, a thread count outside 0..16, a per-thread count below 0 or a product above 64 is an
// error naming the variables (NCCL clamps the last two with a warning; here they are refused).
func SocketsFromEnv(lookup func(string) (string, bool)) (int, error) {
	get := func(name string, auto int) (int, error) {
		v, ok := lookup(name)
		if !ok || strings.TrimSpace(v) == "" {
			return auto, nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return 0, fmt.Errorf("%s=%q: want an integer", name, v)
		}
		if n == -2 {
			return auto, nil
		}
		return n, nil
	}
	nt, err := get(EnvSocketThreads, 0)
	if err != nil {
		return 0, err
	}
	ns, err := get(EnvSocksPerThread, 1)
	if err != nil {
		return 0, err
	}
	switch {
	case nt < 0 || nt > MaxSocketThreads:
		return 0, fmt.Errorf("%s=%d: want 0..%d (or -2, auto)", EnvSocketThreads, nt, MaxSocketThreads)
	case ns < 0:
		return 0, fmt.Errorf("%s=%d: want 0 or more (or -2, auto)", EnvSocksPerThread, ns)
	case nt*ns > MaxSockets:
		return 0, fmt.Errorf("%s=%d x %s=%d = %d sockets: at most %d", EnvSocketThreads, nt, EnvSocksPerThread, ns, nt*ns, MaxSockets)
	}
	return nt * ns, nil
}

// DelayFromEnv is COLLPLAN_NET_DELAY_US, the per-message latency the receiving proxy injects
// (Setup.Delay): unset or empty is 0 (off); otherwise whole microseconds, 0..1000000.
func DelayFromEnv(lookup func(string) (string, bool)) (time.Duration, error) {
	v, ok := lookup(EnvDelay)
	if !ok || strings.TrimSpace(v) == "" {
		return 0, nil
	}
	us, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || us < 0 || time.Duration(us)*time.Microsecond > maxDelay {
		return 0, fmt.Errorf("%s=%q: want whole microseconds, 0..%d", EnvDelay, v, maxDelay.Microseconds())
	}
	return time.Duration(us) * time.Microsecond, nil
}

// sock is one TCP socket of a link with its buffers: socket 0 is the control socket (every
// frame header, inline payloads, heartbeats), 1.. the data sockets.
type sock struct {
	c     stdnet.Conn
	w     *bufio.Writer
	r     *bufio.Reader
	armed bool         // write deadline set in this pass
	sent  atomic.Int64 // payload bytes written (tests)
}

func newSock(c stdnet.Conn, spin time.Duration) *sock {
	c.SetDeadline(time.Time{})
	return &sock{c: c, w: bufio.NewWriterSize(c, 256<<10), r: bufio.NewReaderSize(newSpinReader(c, spin), 256<<10)}
}

// stripe calls f for each piece of an n-byte payload in order, with the socket that carries it:
// up to InlineBytes (or with no data sockets) the control socket; else tasks of
// max(chunk, ceil(n/data sockets)) bytes on the data sockets in turn, the turn kept across
// payloads (*next), as NCCL's socket plugin cuts a message. Writer and reader call it with the
// same n in the same order, so they agree on every piece's socket.
func stripe(socks []*sock, next *int, n, chunk int, f func(s *sock, lo, hi int) error) error {
	data := len(socks) - 1
	if data == 0 || n <= InlineBytes {
		return f(socks[0], 0, n)
	}
	task := max(chunk, (n+data-1)/data)
	for lo := 0; lo < n; lo += task {
		s := socks[1+*next]
		*next = (*next + 1) % data
		if err := f(s, lo, min(n, lo+task)); err != nil {
			return err
		}
	}
	return nil
}

// put appends b to socket s's buffer. Before the poller writes to another socket than the last
// one, it flushes the last: at most one socket then holds buffered bytes, and every piece before
// them in stream order is in the kernel. The link's one reader takes the pieces in that order,
// so it never waits for bytes still in a user-space buffer behind a blocked write (no deadlock
// between sockets however their kernel buffers fill).
func (l *link) put(s *sock, b []byte) {
	if l.cur != nil && l.cur != s {
		l.flushCur()
	}
	l.cur = s
	if !s.armed {
		s.c.SetWriteDeadline(l.deadline)
		s.armed = true
	}
	s.w.Write(b) // errors surface at Flush
	l.dirty = true
}

func (l *link) flushCur() {
	if l.cur == nil {
		return
	}
	if err := l.cur.w.Flush(); err != nil && l.werr == nil {
		l.werr = err
	}
}

// putPayload writes an n-byte payload striped over the link's sockets.
func (l *link) putPayload(b []byte, chunk int) {
	stripe(l.socks, &l.wnext, len(b), chunk, func(s *sock, lo, hi int) error {
		l.put(s, b[lo:hi])
		if s != l.socks[0] {
			s.sent.Add(int64(hi - lo))
		}
		return nil
	})
}

// readPayload fills b from the link's sockets in the writer's order.
func (l *link) readPayload(b []byte, chunk int, timeout time.Duration) error {
	return stripe(l.socks, &l.rnext, len(b), chunk, func(s *sock, lo, hi int) error {
		if s != l.socks[0] {
			s.c.SetReadDeadline(time.Now().Add(timeout))
		}
		if _, err := io.ReadFull(s.r, b[lo:hi]); err != nil {
			return fmt.Errorf("read socket %d: %w", l.index(s), err)
		}
		return nil
	})
}

func (l *link) index(s *sock) int {
	for i, x := range l.socks {
		if x == s {
			return i
		}
	}
	return -1
}

// close closes every socket of the link.
func (l *link) close() {
	for _, s := range l.socks {
		if s != nil {
			s.c.Close()
		}
	}
}
