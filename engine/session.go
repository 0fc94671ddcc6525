package engine

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"sync"
	"time"

	"github.com/collplan/collplan/engine/launch"
)

// Session is a rank's rendezvous connections, kept open for the communicator's life: rank 0 holds
// one to every other rank, every other rank one to rank 0. A connection that ends without the
// goodbye its rank sends at Close means that rank's process died (the kernel closed its sockets)
// or the connection was cut; the rank at this end then aborts the attached communicator on behalf
// of the rank at the other end, and every rank's waits end with an *AbortError naming it. Before
// Attach, the first such loss is remembered and aborts the communicator when it is attached.
type Session struct {
	// Job is the job id every rank agreed on.
	Job string

	rank  int
	conns []net.Conn // by peer rank; nil where this rank has no connection

	mu     sync.Mutex
	comm   *Comm // attached communicator, nil once detached
	lost   int   // the first peer whose connection ended without a goodbye; -1 none
	closed bool
	wg     sync.WaitGroup
}

// goodbye is what a rank sends on its rendezvous connections when it closes cleanly.
const goodbye = "BYE\n"

// closeWait bounds how long Close waits for the peers to close their ends after its goodbye (so
// that the goodbye is read before a reset could discard it); a stopped peer never does.
const closeWait = 250 * time.Millisecond

func newSession(job string, rank int, conns []net.Conn) *Session {
	s := &Session{Job: job, rank: rank, conns: conns, lost: -1}
	for peer, c := range conns {
		if c == nil {
			continue
		}
		s.wg.Add(1)
		go s.watch(peer, c)
	}
	return s
}

// watch reads peer's connection until it ends: a goodbye is a clean end, anything else (EOF, a
// reset, an error) is the peer lost.
func (s *Session) watch(peer int, c net.Conn) {
	defer s.wg.Done()
	last := "" // the last bytes read: a goodbye ends the stream of a clean close
	buf := make([]byte, 64)
	for {
		n, err := c.Read(buf)
		if last += string(buf[:n]); len(last) > len(goodbye) {
			last = last[len(last)-len(goodbye):]
		}
		if err != nil {
			break
		}
	}
	if last == goodbye {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return // this end closed it
	}
	if s.lost < 0 {
		s.lost = peer
	}
	if s.comm != nil {
		s.comm.abortFor(peer, abortGone)
	}
}

// Attach makes a lost peer abort c (at once if one was lost already). Comm.Close detaches it.
func (s *Session) Attach(c *Comm) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.comm = c
	c.session.Store(s)
	if s.lost >= 0 {
		c.abortFor(s.lost, abortGone)
	}
}

// Lost returns the first peer whose connection ended without a goodbye.
func (s *Session) Lost() (rank int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost, s.lost >= 0
}

// detach stops aborts of the attached communicator (it is about to unmap its regions).
func (s *Session) detach() {
	s.mu.Lock()
	s.comm = nil
	s.mu.Unlock()
}

// Close says goodbye on every connection and closes them. It is idempotent and waits at most
// closeWait for the watchers.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.comm = nil
	s.mu.Unlock()
	for _, c := range s.conns {
		if c == nil {
			continue
		}
		c.SetWriteDeadline(time.Now().Add(closeWait))
		c.Write([]byte(goodbye))
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite() // the peer reads the goodbye, then EOF
		}
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-done: // every peer closed its end too
	case <-t.C:
	}
	for _, c := range s.conns {
		if c != nil {
			c.Close()
		}
	}
	return nil
}

// ConfigHash hashes what every rank of a communicator must agree on before it starts: n, the
// normalized configuration (ranks per node, buffers, channels, override, the CollNet endpoint's
// address), its decision tables, and extra values the caller adds (benchmark parameters, ...). A
// Config.Plan function cannot be hashed; callers that use one should add what determines it to
// extra.
func ConfigHash(n int, cfg Config, extra ...string) (uint64, error) {
	c, err := cfg.normalize(n)
	if err != nil {
		return 0, err
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "n=%d rpn=%d buf=%d/%d/%d ch=%d override=%+v plan=%t\n", n, c.RanksPerNode,
		c.Buffers.LL, c.Buffers.LL128, c.Buffers.Simple, c.Channels, c.Override, c.Plan != nil)
	if c.CollNet.Addr != "" {
		fmt.Fprintf(h, "collnet=%q\n", c.CollNet.Addr) // (the job name comes from the rendezvous)
	}
	for i, t := range c.Tables {
		if t == nil {
			fmt.Fprintf(h, "table %d nil\n", i)
			continue
		}
		fmt.Fprintf(h, "table %d %+v\n", i, t.Entries())
	}
	for _, x := range extra {
		fmt.Fprintf(h, "%q\n", x)
	}
	return h.Sum64(), nil
}

// Rendezvous brings the ranks of a job together (see Join) and closes the connections at once,
// returning the job id. Ranks that use it learn of a dead peer only through their waits' other
// checks (a launcher's abort, the watchdog); Join keeps the connections and aborts on EOF.
func Rendezvous(ctx context.Context, rank, size int, addr string, cfgHash uint64, job string, timeout time.Duration) (string, error) {
	s, err := Join(ctx, rank, size, addr, cfgHash, job, timeout)
	if err != nil {
		return "", err
	}
	s.Close()
	return s.Job, nil
}

// Join brings the ranks of a job together over TCP on loopback (launch.Connect): rank 0 listens on addr, the
// others connect (retrying until the deadline) and send their rank, size and configuration hash;
// rank 0 checks every rank's against its own and hands out the job id (job, or a fresh one owned
// by this process when job is ""), or refuses every rank with the same error naming the first
// difference. Every rank returns its Session, or an error; none waits past timeout.
//
// The connections stay open for the communicator's life (Session.Attach): a rank whose process
// dies closes them (the kernel does), and the rank at the other end aborts the communicator on
// its behalf, so no rank waits forever for a dead peer, with or without a launcher.
func Join(ctx context.Context, rank, size int, addr string, cfgHash uint64, job string, timeout time.Duration) (*Session, error) {
	job, conns, err := launch.Connect(ctx, rank, size, addr, cfgHash, job, timeout)
	if err != nil {
		return nil, err
	}
	return newSession(job, rank, conns), nil
}
