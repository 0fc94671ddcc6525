package net

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/collplan/collplan/bootstrap"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport"
)

// Rank processes: StartRank makes a Host for one rank process instead of one host. The host's
// ranks are then processes sharing the host's segments through shm (each its own shm handle on
// the host's job), and each rank process runs the proxy of the cross-host connections it sends or
// receives on, as NCCL gives every rank a proxy. What changes against one Host per host:
//
//   - Links are by rank, not by host (the Host's "endpoints" are ranks): every rank process
//     listens, and has one link to every rank process on another host (the higher rank dials the
//     lower); none to the ranks of its own host, which meet in shm.
//   - A crossing connection FROM-TO is copied by FROM's process on FROM's host and by TO's
//     process on TO's host, over the link between the two.
//   - Control lines: a rank process mirrors only its own rank's three lines, and only to the
//     applier of each other host, that host's lowest rank (its reader refuses lines from anyone
//     else, and refuses to apply them unless it is the applier). So exactly one writer stores
//     each (remote rank's line, host) pair, the applier's reader for the link to that rank, in
//     the order the rank's one poller sent them on one ordered stream: a line never rolls back.
//     (Were every rank process of a host to apply what it received, two readers of one line
//     could interleave, the one holding an older descriptor storing it after the newer.)
//   - The abort word goes on every link, and every reader does CompareAndSwap(0, v): any number of
//     writers, the first wins, as on one host.
//   - A goodbye carries the sender's state word: the far side cannot read it from its own ctrl
//     copy, which only its host's applier writes, on another stream that may lag.
//   - A lost link aborts naming the far rank (AbortWord(rank, AbortHostLost)); the abort reaches
//     the lost rank's host-mates through the other hosts' links.
type procMode struct {
	rank   int         // this process's rank
	hosts  int         // hosts in the job
	killed atomic.Bool // tests: an emulated killed process, which stores nothing more

	mu   sync.Mutex
	from map[int]bool // the ranks whose control lines reached this process's readers (tests)
}

// applied returns the ranks whose control lines reached this rank process, in order.
func (p *procMode) applied() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for r := range p.from {
		out = append(out, r)
	}
	sort.Ints(out)
	return out
}

// Hello magics: a Host per host and a Host per rank process refuse each other.
const helloMagicProc = 0x6e65747072616e6b // "netprank"

// StartRank starts the net transport of rank in a job whose ranks are processes, each with its
// own local transport (shm over the host's job): s.Peers has every rank's listener address, by
// rank (RankPlacementOf), s.Listener is this rank's, and s.Host is set to rank / RanksPerHost.
// local is a handle on the host's shared memory for the proxy's own use (not the one the
// rank's Rank closes: the proxy still reads the control region after the rank's Comm closed);
// close it after the Host. Every rank of the job must be started with StartRank (a Host of
// Start refuses it at set-up with ErrConfig), and each rank by one process only.
func StartRank(ctx context.Context, rank int, s Setup, local transport.Transport) (*Host, error) {
	switch {
	case s.Ranks < 1 || s.RanksPerHost < 1:
		return nil, fmt.Errorf("%w: net: rank process: %d ranks at %d per host", wire.ErrInvalid, s.Ranks, s.RanksPerHost)
	case rank < 0 || rank >= s.Ranks:
		return nil, fmt.Errorf("%w: net: rank %d of %d", wire.ErrInvalid, rank, s.Ranks)
	case len(s.Peers) != s.Ranks:
		return nil, fmt.Errorf("%w: net: rank %d: Peers has %d addresses: a rank process wants one per rank (%d)", wire.ErrInvalid, rank, len(s.Peers), s.Ranks)
	}
	for r, a := range s.Peers {
		if a == "" && r/s.RanksPerHost != rank/s.RanksPerHost {
			return nil, fmt.Errorf("%w: net: rank %d: Peers[%d] is empty", wire.ErrInvalid, rank, r)
		}
	}
	s.Host = rank / s.RanksPerHost
	s.proc = &procMode{rank: rank, hosts: (s.Ranks + s.RanksPerHost - 1) / s.RanksPerHost}
	return Start(ctx, s, local)
}

// RankPlacementOf is PlacementOf for rank processes (StartRank): the same hosts and ranks per
// host, but Peers has every rank's address (the first its record advertised), by rank.
func RankPlacementOf(r bootstrap.Roster, rank int) (Placement, error) {
	p, err := PlacementOf(r, rank)
	if err != nil {
		return Placement{}, err
	}
	p.Peers = make([]string, r.Size)
	for q, rec := range r.Records {
		if len(rec.Endpoint.Addrs) == 0 || rec.Endpoint.Addrs[0] == "" {
			return Placement{}, fmt.Errorf("%w: net: rank %d (node %s) advertised no address", wire.ErrInvalid, q, rec.Node)
		}
		p.Peers[q] = rec.Endpoint.Addrs[0]
	}
	return p, nil
}

// self is this Host's endpoint: its host index, or its rank for a rank process.
func (h *Host) self() int {
	if h.s.proc != nil {
		return h.s.proc.rank
	}
	return h.s.Host
}

// endOf is the endpoint of rank r: its host, or r itself for rank processes.
func (h *Host) endOf(r int) int {
	if h.s.proc != nil {
		return r
	}
	return h.HostOf(r)
}

// endRanks is the ranks [lo, hi) of endpoint e.
func (h *Host) endRanks(e int) (lo, hi int) {
	if h.s.proc != nil {
		return e, e + 1
	}
	return e * h.s.RanksPerHost, min(h.s.Ranks, (e+1)*h.s.RanksPerHost)
}

// remote reports whether endpoint e gets a link: every other host; for a rank process, every rank
// on another host.
func (h *Host) remote(e int) bool {
	if h.s.proc != nil {
		return h.HostOf(e) != h.s.Host
	}
	return e != h.s.Host
}

// above is the count of remote endpoints above this one (they dial it).
func (h *Host) above() int {
	n := 0
	for e := h.self() + 1; e < len(h.s.Peers); e++ {
		if h.remote(e) {
			n++
		}
	}
	return n
}

func (h *Host) endKind() string {
	if h.s.proc != nil {
		return "rank"
	}
	return "host"
}

func (h *Host) endName(e int) string {
	if h.s.proc != nil {
		return fmt.Sprintf("rank %d (host %d)", e, h.HostOf(e))
	}
	return fmt.Sprintf("host %d", e)
}

func (h *Host) magic() uint64 {
	if h.s.proc != nil {
		return helloMagicProc
	}
	return helloMagic
}

// checkHello refuses a hello from the other kind of Host: one Host per host and one per rank
// process cannot share a job (each would mirror control lines the other also writes).
func (h *Host) checkHello(b []byte) error {
	m := binary.LittleEndian.Uint64(b[0:])
	if m != helloMagic && m != helloMagicProc || m == h.magic() {
		return nil
	}
	j := int(binary.LittleEndian.Uint64(b[8:]))
	if h.s.proc != nil {
		return fmt.Errorf("%w: net: %s: host %d dialled with one Host for all of its ranks (Start), this is a rank process (StartRank): every rank must be its own process, or every host one process",
			wire.ErrConfig, h.endName(h.self()), j)
	}
	return fmt.Errorf("%w: net: host %d: rank %d dialled as a rank process (StartRank), this host runs one Host for all of its ranks (Start): every rank must be its own process, or every host one process",
		wire.ErrConfig, h.s.Host, j)
}

// checkDuplicate refuses, for a rank process, a second socket idx from rank j: two processes
// started as one rank would both write its control lines into the applier's region.
func (h *Host) checkDuplicate(j, idx int) error {
	if h.s.proc == nil || idx < 0 || idx > h.s.Sockets || !h.hasSock(j, idx) {
		return nil
	}
	return fmt.Errorf("%w: net: %s: rank %d dialled twice (socket %d): two processes run rank %d", wire.ErrConfig, h.endName(h.self()), j, idx, j)
}

// applier is the rank process that applies the other hosts' control lines on host k: its lowest
// rank.
func (h *Host) applier(k int) int { return k * h.s.RanksPerHost }

// mirrorsTo reports whether this Host sends its control lines to endpoint e: every host, or the
// applier of e's host.
func (h *Host) mirrorsTo(e int) bool {
	return h.s.proc == nil || e == h.applier(h.HostOf(e))
}

// checkApplier refuses a control line of rank from that reached a rank process other than its
// host's applier (a second writer of that line).
func (h *Host) checkApplier(from int) error {
	if h.s.proc == nil {
		return nil
	}
	h.s.proc.mu.Lock()
	if h.s.proc.from == nil {
		h.s.proc.from = make(map[int]bool)
	}
	h.s.proc.from[from] = true
	h.s.proc.mu.Unlock()
	if h.self() == h.applier(h.s.Host) {
		return nil
	}
	return fmt.Errorf("control line of rank %d sent to rank %d: rank %d applies host %d's control lines (one writer per line and host)",
		from, h.self(), h.applier(h.s.Host), h.s.Host)
}

// byeWord is the value of this Host's goodbye: a rank process's state word (bit 0: its Comm is
// closed), 0 from a Host per host.
func (h *Host) byeWord() uint64 {
	if h.s.proc == nil {
		return 0
	}
	return atomic.LoadUint64(wire.WordAt(h.ctrl, wire.CtrlRankOffset+h.s.proc.rank*wire.CtrlRankSize))
}

// stateAtBye is rank r's state word when its endpoint said goodbye on l: from this host's copy
// for a Host per host (the far poller sent the line before the goodbye, on the same stream), from
// the goodbye itself for a rank process (this host's copy is written by its applier, from another
// stream).
func (h *Host) stateAtBye(l *link, r int) uint64 {
	if h.s.proc != nil {
		return l.bye
	}
	return atomic.LoadUint64(wire.WordAt(h.ctrl, wire.CtrlRankOffset+r*wire.CtrlRankSize))
}

// procFail is a rank process's fail: it records the first lost link, naming the far rank, and
// aborts the communicator on this host naming that rank (AbortWord(peer, AbortHostLost)).
func (h *Host) procFail(peer int, err error) {
	if h.s.proc.killed.Load() {
		return
	}
	h.errMu.Lock()
	if h.err == nil {
		h.err = fmt.Errorf("net: rank %d (host %d) lost rank %d (host %d, %s): %w", h.self(), h.s.Host, peer, h.HostOf(peer), h.s.Peers[peer], err)
	}
	h.errMu.Unlock()
	atomic.CompareAndSwapUint64(wire.WordAt(h.ctrl, wire.CtrlAbortOffset), 0, wire.AbortWord(peer, wire.AbortHostLost))
}
