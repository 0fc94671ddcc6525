package engine

import (
	"net"
	"sync"
	"time"
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
