package net

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	stdnet "net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/planner"
)

// LayoutOf is the connection layout of the engine's Config.Buffers (NCCL's defaults where a size is
// 0), as Setup.Layout wants it: a program outside the engine's rooms has no other way to name it.
func LayoutOf(b planner.Buffers) wire.ConnLayout {
	b = b.WithDefaults()
	return wire.ConnLayout{LLBytes: int(b.LL), LL128Bytes: int(b.LL128), SimpleBytes: int(b.Simple)}
}

// Setup is what a host's net transport is made from: where it is in the job, its listener, the
// other hosts' addresses and the connection geometry every rank uses.
type Setup struct {
	Host         int             // this host's index, 0..len(Peers)-1
	Ranks        int             // ranks in the communicator
	RanksPerHost int             // consecutive ranks per host (engine Config.RanksPerNode must equal it)
	Listener     stdnet.Listener // this host's listener (its address is Peers[Host])
	Peers        []string        // every host's listener address, by host index
	Layout       wire.ConnLayout // the engine's Config.Buffers as a connection layout
	// Timeout bounds connection set-up and every socket read and write; a peer silent for this
	// long (heartbeats every Timeout/4) is lost. 0 means 5 s.
	Timeout time.Duration
	// Sockets is the data sockets per pair of hosts beside the control socket, 0..MaxSockets
	// (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD: SocketsFromEnv); every host must have the
	// same. 0: every payload on the control socket.
	Sockets int
	// ChunkBytes is the smallest piece a payload is striped in over the data sockets; 0 means
	// MinChunkBytes (NCCL's). Tests set it small to stripe tiny buffers.
	ChunkBytes int
	// Delay is the latency the receiving proxy adds to every frame (COLLPLAN_NET_DELAY_US:
	// DelayFromEnv), an emulation knob for hosts on one machine; 0, the default, adds none.
	Delay time.Duration
	// Colocated is how many host processes share this machine's cores, this one included
	// (COLLPLAN_NET_COLOCATED: ColocatedFromEnv; collbench --hosts sets it): 0 or 1 on a real
	// host. When the colocated hosts' ranks outnumber the cores, the waits and the readers park
	// early (parkAfter) instead of yielding for a millisecond.
	Colocated int

	proc *procMode // StartRank's: one Host per rank process (procs.go); nil: one per host
}

// Host is one host's net transport: the proxies that copy the cross-host connections and the
// control lines between this host's local copies and the other hosts'.
type Host struct {
	s     Setup
	local transport.Transport
	links []*link // by host index; nil for this host

	mu    sync.Mutex
	ctrl  []byte
	conns map[connKey]*conn
	list  []*conn // in registration order, read by the poller under mu

	lastCtrl []uint64     // the poller's last sent copy of every local rank's lines
	beatSent []int64      // per rank of this host: when its line 0 last went out (Unix ns; passCtrl)
	beatLag  atomic.Int64 // beatLag in ns (tests change it)
	ctrlSent atomic.Int64 // control-line frames sent (tests)
	abortOut bool

	sentBytes atomic.Int64 // payload bytes sent over TCP (tests)
	errMu     sync.Mutex
	err       error

	raceSync uint64 // the race detector's edge through the sockets (pass, readLoop)

	stop chan struct{}
	wake chan struct{} // a reader applied a frame, or a rank began to wait (the poller's back-off ends)
	bell bell          // rung after every frame a reader applies that can end a wait (the ranks' parked waits)
	// parked: the colocated hosts' ranks outnumber the cores, and waits park after parkAfter
	// (ParkAfter), readers wait in Go's poller at once, holds sleep (hold).
	parked bool
	// sockSpin is how long a reader tries its socket before it waits in Go's poller: readSpin,
	// or none where waits park early.
	sockSpin time.Duration
	// idlePasses is how many empty passes the poller makes, yielding, before it waits on a
	// timer (poll): idlePasses, or parkedIdlePasses where waits park early (parked).
	idlePasses int
	done       sync.WaitGroup // the poller
	readers    sync.WaitGroup
	once       sync.Once
}

type connKey struct{ ch, from, to uint32 }

func (k connKey) name() string { return transport.ConnRegion(int(k.ch), int(k.from), int(k.to)) }

// conn is one cross-host connection's local copy and the poller's position in it.
type conn struct {
	key    connKey
	r      []byte
	sender bool // the sending rank is on this host
	peer   *link

	step     uint64 // sender side: the next step to forward
	mode     int    // 0 unknown, modeLL, modeLL128
	line     int    // lines of the current step forwarded
	headSent uint64 // receiver side: the last head sent back
}

const (
	modeLL = 1 + iota
	modeLL128
)

// Start connects host s.Host to every other host (it dials the hosts below it and accepts the
// hosts above it, each within s.Timeout) and starts its proxies. local is a handle on this
// host's local transport that the proxies use to map the regions they copy.
func Start(ctx context.Context, s Setup, local transport.Transport) (*Host, error) {
	if s.Timeout == 0 {
		s.Timeout = 5 * time.Second
	}
	hosts := len(s.Peers)
	if s.proc != nil {
		hosts = s.proc.hosts // Peers is by rank (StartRank checked it)
	}
	switch {
	case hosts < 1 || s.Host < 0 || s.Host >= hosts:
		return nil, fmt.Errorf("%w: net: host %d of %d", wire.ErrInvalid, s.Host, hosts)
	case s.RanksPerHost < 1 || s.Ranks < 1 || (s.Ranks+s.RanksPerHost-1)/s.RanksPerHost != hosts:
		return nil, fmt.Errorf("%w: net: %d ranks at %d per host do not make %d hosts", wire.ErrInvalid, s.Ranks, s.RanksPerHost, hosts)
	case s.Listener == nil || local == nil:
		return nil, fmt.Errorf("%w: net: nil listener or local transport", wire.ErrInvalid)
	case s.Timeout < 0:
		return nil, fmt.Errorf("%w: net: Timeout %v", wire.ErrInvalid, s.Timeout)
	case s.Sockets < 0 || s.Sockets > MaxSockets:
		return nil, fmt.Errorf("%w: net: Sockets %d: want 0..%d (%s x %s)", wire.ErrInvalid, s.Sockets, MaxSockets, EnvSocketThreads, EnvSocksPerThread)
	case s.ChunkBytes < 0:
		return nil, fmt.Errorf("%w: net: ChunkBytes %d", wire.ErrInvalid, s.ChunkBytes)
	case s.Delay < 0 || s.Delay > maxDelay:
		return nil, fmt.Errorf("%w: net: Delay %v: want 0..%v (%s)", wire.ErrInvalid, s.Delay, maxDelay, EnvDelay)
	case s.Colocated < 0 || s.Colocated > maxColocated:
		return nil, fmt.Errorf("%w: net: Colocated %d: want 0..%d (%s)", wire.ErrInvalid, s.Colocated, maxColocated, EnvColocated)
	}
	h := &Host{s: s, local: local, links: make([]*link, len(s.Peers)), conns: make(map[connKey]*conn), stop: make(chan struct{}), wake: make(chan struct{}, 1)}
	h.sockSpin, h.idlePasses = readSpin, idlePasses
	// Early parking is for a host process, whose ranks are its goroutines: a rank process's
	// host-mates store into its regions through shared memory, which rings no bell, so its waits
	// keep the engine's yield phase (a parked wait would find their stores only at its timer).
	if s.proc == nil && max(s.Colocated, 1)*s.RanksPerHost > runtime.NumCPU() {
		h.parked, h.sockSpin, h.idlePasses = true, 0, parkedIdlePasses
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	if err := h.connect(ctx); err != nil {
		h.closeLinks()
		return nil, err
	}
	ctrl, err := local.Region(transport.CtrlRegion, wire.CtrlSize(s.Ranks))
	if err != nil {
		h.closeLinks()
		return nil, fmt.Errorf("net: ctrl: %w", err)
	}
	h.ctrl = ctrl
	h.lastCtrl = make([]uint64, len(ctrl)/8)
	h.beatSent = make([]int64, s.Ranks)
	h.beatLag.Store(int64(beatLag))
	for _, l := range h.links {
		if l != nil {
			h.readers.Add(1)
			go h.read(l)
		}
	}
	h.done.Add(1)
	go h.poll()
	return h, nil
}

// hello is the first frame on a socket: magic, the dialer's host index, ranks, ranks per host,
// the connection layout word (ConnLayout.Word), the data sockets per link (Setup.Sockets) and
// this socket's index in its link (0: control), each 8 bytes.
const (
	helloMagic = 0x6e65746870726f78 // "netnprox"
	helloBytes = 56
)

// chunk is the striping's smallest piece.
func (h *Host) chunk() int {
	if h.s.ChunkBytes > 0 {
		return h.s.ChunkBytes
	}
	return MinChunkBytes
}

func (h *Host) connect(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(h.links))
	deadline, _ := ctx.Deadline()
	for j := 0; j < h.self(); j++ {
		if !h.remote(j) {
			continue
		}
		wg.Add(1)
		go func(j int) {
			defer wg.Done()
			var d stdnet.Dialer
			for idx := 0; idx <= h.s.Sockets; {
				c, err := d.DialContext(ctx, "tcp", h.s.Peers[j])
				if err == nil {
					tuneSocket(c, h.s.Timeout)
					var b [helloBytes]byte
					binary.LittleEndian.PutUint64(b[0:], h.magic())
					binary.LittleEndian.PutUint64(b[8:], uint64(h.self()))
					binary.LittleEndian.PutUint64(b[16:], uint64(h.s.Ranks))
					binary.LittleEndian.PutUint64(b[24:], uint64(h.s.RanksPerHost))
					binary.LittleEndian.PutUint64(b[32:], h.s.Layout.Word())
					binary.LittleEndian.PutUint64(b[40:], uint64(h.s.Sockets))
					binary.LittleEndian.PutUint64(b[48:], uint64(idx))
					c.SetWriteDeadline(deadline)
					if _, err = c.Write(b[:]); err == nil {
						h.setSock(j, idx, c)
						idx++
						continue
					}
					c.Close()
				}
				select {
				case <-ctx.Done():
					errs <- fmt.Errorf("net: %s: dial %s at %s (socket %d of %d): %w", h.endName(h.self()), h.endName(j), h.s.Peers[j], idx, 1+h.s.Sockets, err)
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}(j)
	}
	want := h.above() * (1 + h.s.Sockets)
	if want > 0 {
		if dl, ok := h.s.Listener.(interface{ SetDeadline(time.Time) error }); ok {
			dl.SetDeadline(deadline)
		}
	}
	for got := 0; got < want; {
		c, err := h.s.Listener.Accept()
		if err != nil {
			wg.Wait()
			return fmt.Errorf("net: %s: accept (%d of %d sockets from the %ss above joined): %w", h.endName(h.self()), got, want, h.endKind(), err)
		}
		tuneSocket(c, h.s.Timeout)
		var b [helloBytes]byte
		c.SetReadDeadline(deadline)
		if _, err := io.ReadFull(c, b[:]); err != nil {
			c.Close()
			continue // not one of ours, or too slow: wait for the next
		}
		j := int(binary.LittleEndian.Uint64(b[8:]))
		idx := int(binary.LittleEndian.Uint64(b[48:]))
		if err := h.checkHello(b[:]); err != nil {
			c.Close()
			wg.Wait()
			return err
		}
		if binary.LittleEndian.Uint64(b[0:]) != h.magic() || j <= h.self() || j >= len(h.links) || !h.remote(j) {
			c.Close()
			continue
		}
		if ns := int(binary.LittleEndian.Uint64(b[40:])); ns != h.s.Sockets {
			c.Close()
			wg.Wait()
			return fmt.Errorf("%w: net: %s has %d data sockets per link, %s has %d (%s x %s must agree)",
				wire.ErrConfig, h.endName(j), ns, h.endName(h.self()), h.s.Sockets, EnvSocketThreads, EnvSocksPerThread)
		}
		if err := h.checkDuplicate(j, idx); err != nil {
			c.Close()
			wg.Wait()
			return err
		}
		if idx < 0 || idx > h.s.Sockets || h.hasSock(j, idx) {
			c.Close()
			continue
		}
		if r, p := int(binary.LittleEndian.Uint64(b[16:])), int(binary.LittleEndian.Uint64(b[24:])); r != h.s.Ranks || p != h.s.RanksPerHost {
			c.Close()
			wg.Wait()
			return fmt.Errorf("%w: net: %s has %d ranks at %d per host, %s has %d at %d",
				wire.ErrConfig, h.endName(j), r, p, h.endName(h.self()), h.s.Ranks, h.s.RanksPerHost)
		}
		if w := binary.LittleEndian.Uint64(b[32:]); w != h.s.Layout.Word() {
			c.Close()
			wg.Wait()
			return fmt.Errorf("%w: net: %s's connection layout (word %#x) differs from %s's (%d, %d, %d bytes of LL, LL128, Simple: word %#x)",
				wire.ErrConfig, h.endName(j), w, h.endName(h.self()), h.s.Layout.LLBytes, h.s.Layout.LL128Bytes, h.s.Layout.SimpleBytes, h.s.Layout.Word())
		}
		h.setSock(j, idx, c)
		got++
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	return nil
}

// readSpin is how long a link's reader keeps trying its socket, yielding, before it waits in Go's
// network poller (spinReader): as long as the engine's waits yield before they sleep. parkAfter
// replaces both when the colocated hosts' ranks outnumber the cores (Setup.Colocated): the waits
// then park on the host's bell after it, and the readers in the poller, so that a host process
// with nothing to do leaves the cores to the hosts that have. Measured across 4 and 8 emulated
// hosts on 2 cores (BENCHMARKS.md, "Parked waits across emulated hosts"): with every wait
// yielding for a millisecond, each hop took about a millisecond (the reader parked, starved by
// its host's yielding ranks until they slept) and the hosts' processes kept both cores busy.
// Then ("Quieter hosts"): a 10 us park-after and 4 empty poller passes before its timer
// (parkedIdlePasses; 64 otherwise) against 50 us and 64 took an 8-byte AllReduce across 8 hosts
// from 1.9 to 1.4 ms (Ring) and 2.5 to 1.7 ms (Tree) with no injected delay; 1 ns instead of 10 us
// was no faster at 8 hosts. Every spinning pass and yield there takes a core some other host's
// hop is waiting for; so does every failed read of a spinning reader (at least spinClockTries
// before its clock is read: 110 EAGAIN reads per host per call across 8 hosts), and there the
// readers wait in the poller at once (sockSpin 0).
const (
	readSpin         = time.Millisecond
	parkAfter        = 10 * time.Microsecond
	idlePasses       = 64
	parkedIdlePasses = 4
)

// setSock installs socket idx of the link to host j.
func (h *Host) setSock(j, idx int, c stdnet.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.links[j] == nil {
		h.links[j] = &link{host: j, socks: make([]*sock, 1+h.s.Sockets), lastSend: time.Now(), readDone: make(chan struct{})}
	}
	h.links[j].socks[idx] = newSock(c, h.sockSpin)
}

func (h *Host) hasSock(j, idx int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.links[j] != nil && h.links[j].socks[idx] != nil
}

// tuneSocket sets TCP_NODELAY and, where the system has it, TCP_USER_TIMEOUT (tcp_linux.go).
func tuneSocket(c stdnet.Conn, timeout time.Duration) {
	if tc, ok := c.(*stdnet.TCPConn); ok {
		tc.SetNoDelay(true)
		setUserTimeout(tc, timeout)
	}
}

// HostOf returns the host of rank r.
func (h *Host) HostOf(r int) int { return r / h.s.RanksPerHost }

// RanksPerHost is the count of consecutive ranks on each host; engine.New checks that
// Config.RanksPerNode equals it.
func (h *Host) RanksPerHost() int { return h.s.RanksPerHost }

// SocketBytes is the payload bytes this host has written on each data socket (1..Sockets) of
// its link to host j; index 0 is unused (the control socket's payloads are not counted here).
func (h *Host) SocketBytes(j int) []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.links[j]
	if l == nil {
		return nil
	}
	out := make([]int64, len(l.socks))
	for i, s := range l.socks {
		if i > 0 && s != nil {
			out[i] = s.sent.Load()
		}
	}
	return out
}

// SentBytes is the payload bytes (FIFO lines and slots) this host has sent over TCP.
func (h *Host) SentBytes() int64 { return h.sentBytes.Load() }

// Err is the error that ended a link, or nil.
func (h *Host) Err() error {
	h.errMu.Lock()
	defer h.errMu.Unlock()
	return h.err
}

// Rank returns rank r's transport: local for its same-host regions, this host's copies for the
// rest.
func (h *Host) Rank(r int, local transport.Transport) (*Rank, error) {
	if r < 0 || r >= h.s.Ranks || h.HostOf(r) != h.s.Host {
		return nil, fmt.Errorf("%w: net: rank %d is not on host %d", wire.ErrInvalid, r, h.s.Host)
	}
	if h.s.proc != nil && r != h.s.proc.rank {
		return nil, fmt.Errorf("%w: net: rank %d is not this rank process's (rank %d)", wire.ErrInvalid, r, h.s.proc.rank)
	}
	return &Rank{h: h, rank: r, local: local}, nil
}

// Rank is one rank's net transport.
type Rank struct {
	h     *Host
	rank  int
	local transport.Transport
}

// RanksPerHost is the host's (engine.New compares it with Config.RanksPerNode).
func (t *Rank) RanksPerHost() int { return t.h.s.RanksPerHost }

// ProcessRanks is how many of the communicator's ranks are goroutines of this process, for the
// engine's waits (engine/waiter.go): the host's ranks over an in-process local transport, else 1.
func (t *Rank) ProcessRanks() int {
	if _, inproc := t.local.(transport.Rank); inproc {
		return t.h.s.RanksPerHost
	}
	return 1
}

// Poke, Bell and ParkAfter make the host a wire.Parker for its ranks' waits: a wait that begins
// wakes the poller (the rank has most likely just published), and a parked wait wakes at the next
// frame a reader applies.
func (t *Rank) Poke() {
	select {
	case t.h.wake <- struct{}{}:
	default:
	}
}

// Bell: see Poke.
func (t *Rank) Bell() <-chan struct{} { return t.h.bell.arm() }

// ParkAfter: see Poke; 0 (the engine's yield phase) unless the colocated hosts' ranks outnumber
// the cores.
func (t *Rank) ParkAfter() time.Duration {
	if t.h.parked {
		return parkAfter
	}
	return 0
}

// Region returns the local transport's region, except for a connection between hosts, whose
// region is this host's copy (see the package doc).
func (t *Rank) Region(name string, size int) ([]byte, error) {
	if name == transport.CtrlRegion {
		if size != len(t.h.ctrl) {
			return nil, fmt.Errorf("net: region ctrl: asked for %d bytes, the host mapped %d (ranks %d)", size, len(t.h.ctrl), t.h.s.Ranks)
		}
		return t.h.ctrl, nil
	}
	if k, ok := parseConn(name); ok && t.h.HostOf(int(k.from)) != t.h.HostOf(int(k.to)) {
		if size != t.h.s.Layout.Size() {
			return nil, fmt.Errorf("%w: net: region %s: asked for %d bytes, the host's layout has %d (Config.Buffers differ from Setup.Layout)",
				wire.ErrConfig, name, size, t.h.s.Layout.Size())
		}
		c, err := t.h.conn(k)
		if err != nil {
			return nil, err
		}
		return c.r, nil
	}
	return t.local.Region(name, size)
}

// Close closes the rank's local transport.
func (t *Rank) Close() error { return t.local.Close() }

func parseConn(name string) (connKey, bool) {
	rest, ok := strings.CutPrefix(name, "conn/")
	if !ok {
		return connKey{}, false
	}
	ch, ft, ok := strings.Cut(rest, "/")
	f, to, ok2 := strings.Cut(ft, "-")
	a, e1 := strconv.Atoi(ch)
	b, e2 := strconv.Atoi(f)
	c, e3 := strconv.Atoi(to)
	if !ok || !ok2 || e1 != nil || e2 != nil || e3 != nil || a < 0 || b < 0 || c < 0 {
		return connKey{}, false
	}
	return connKey{uint32(a), uint32(b), uint32(c)}, true
}

// conn returns the host's copy of cross-host connection k, mapping it on first use (by a local
// rank, or by the reader when the far side's proxy gets there first).
func (h *Host) conn(k connKey) (*conn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.conns[k]; ok {
		return c, nil
	}
	if int(k.from) >= h.s.Ranks || int(k.to) >= h.s.Ranks {
		return nil, fmt.Errorf("%w: net: connection %s: rank outside 0..%d", wire.ErrInvalid, k.name(), h.s.Ranks-1)
	}
	fh, th := h.endOf(int(k.from)), h.endOf(int(k.to))
	if fh != h.self() && th != h.self() {
		return nil, fmt.Errorf("%w: net: connection %s has no end on %s", wire.ErrInvalid, k.name(), h.endName(h.self()))
	}
	r, err := h.local.Region(k.name(), h.s.Layout.Size())
	if err != nil {
		return nil, fmt.Errorf("net: %s: %w", k.name(), err)
	}
	c := &conn{key: k, r: r, sender: fh == h.self()}
	if c.sender {
		c.peer = h.links[th]
	} else {
		c.peer = h.links[fh]
	}
	h.conns[k] = c
	h.list = append(h.list, c)
	return c, nil
}

// Close stops the proxies after one last pass (so this host's final control lines and abort word
// reach the others), says goodbye on every link and closes them. Call it after every local rank's
// Comm is closed.
func (h *Host) Close() error {
	h.once.Do(func() {
		close(h.stop)
		h.done.Wait()
		h.closeLinks()
		h.readers.Wait()
	})
	return nil
}

// cut closes every link without a goodbye, as a dead host would (fault tests).
func (h *Host) cut() {
	h.mu.Lock()
	for _, l := range h.links {
		if l != nil {
			l.close()
		}
	}
	h.mu.Unlock()
	h.once.Do(func() {
		close(h.stop)
		h.done.Wait()
		h.readers.Wait()
	})
}

func (h *Host) closeLinks() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.links {
		if l != nil {
			l.close()
		}
	}
}

// fail records the first link error and aborts the communicator on this host, naming the first
// rank of the lost host (wire.AbortHostLost): every local wait ends with it.
func (h *Host) fail(peer int, err error) {
	if l := h.links[peer]; l != nil && l.left.Load() {
		return // its ranks closed and it said goodbye: the heartbeat that found its socket closed lost nothing
	}
	if h.s.proc != nil {
		h.procFail(peer, err)
		return
	}
	h.errMu.Lock()
	if h.err == nil {
		h.err = fmt.Errorf("net: host %d lost host %d (%s, ranks %d..%d): %w", h.s.Host, peer, h.s.Peers[peer],
			peer*h.s.RanksPerHost, min(h.s.Ranks, (peer+1)*h.s.RanksPerHost)-1, err)
	}
	h.errMu.Unlock()
	atomic.CompareAndSwapUint64(wire.WordAt(h.ctrl, wire.CtrlAbortOffset), 0, wire.AbortWord(peer*h.s.RanksPerHost, wire.AbortHostLost))
}

var errBye = errors.New("net: goodbye")
