// Package net is the engine's network transport (NCCL's src/transport/net.cc with its proxy
// thread, over TCP sockets as NCCL's socket net plugin): ranks on different hosts cannot share
// memory, so each side of a connection between hosts gets a local copy of the connection's region,
// and a proxy per host (or per rank process: StartRank) moves what the local senders complete into the far receivers' copies and
// the receivers' heads (credits) back.
//
// # Hosts and regions
//
// A job of Ranks ranks spreads RanksPerHost consecutive ranks per host (engine.New refuses a
// Config.RanksPerNode that differs, naming both). Each host runs one Host (Start): its TCP link
// to every other host (the higher host index dials, the lower accepts; a hello frame with the job's
// shape and layout word, checked), one poller goroutine (the proxy) and one reader per link. A rank's transport
// (Host.Rank) hands out:
//   - "ctrl": this host's local copy (from the host's local transport: in-process in tests, shm
//     for rank processes). The poller mirrors each local rank's three lines to every other host:
//     exactly one writer per (rank, host), so values never roll back. A descriptor line is read seq
//     first and only when seq changed (agree.go's rule: seq, stored last with release, means the
//     rest is there), and the far reader stores words 1.. then word 0 (seq, or the state word) with
//     release. The abort word goes to every host once; the far side does CompareAndSwap(0, v), so
//     the first abort wins locally.
//   - "conn/C/FROM-TO" with FROM and TO on different hosts: the host's copy, mapped from its local
//     transport (by the first local rank to ask, or by the reader when the far side's first frame
//     comes first).
//   - everything else (same-host connections, "nvls/...", "collnet/...") straight from the local
//     transport: no byte of it crosses TCP (TestOnlyCrossHostConnectionsUseTCP).
//
// # The proxy
//
// Sender side, per crossing connection, one step at a time (step s, slot s mod NCCL_STEPS; the
// protocol of a step is found from the slot itself, since steps count across protocols):
//   - LL: line k is complete when both 8-byte halves carry flag uint32(s+1); complete lines go in
//     order as they appear.
//   - LL128: line k is complete when its last word is s+1 (acquire load); then its 128 bytes go.
//   - Simple: tail > s (acquire); the step's bytes go (the sender stores the byte count in the
//     slot's size word of the tail line before the tail: wire's PublishSimple), and the far side
//     sets tail = s+1.
//   - A step ends when all its slot's lines are in, or when a later step shows (a later slot's first
//     line carries that step's flag, or the tail passed s+1); the current slot is then scanned once
//     more, and what is complete goes. Stale lines never match: their flags are older step numbers.
//
// # Sockets
//
// Each pair of hosts has a control socket and Setup.Sockets data sockets (NCCL_SOCKET_NTHREADS x
// NCCL_NSOCKS_PERTHREAD, SocketsFromEnv: none by default, as NCCL on an ordinary NIC). Headers
// and payloads up to 128 bytes go on the control socket; a longer payload is cut into tasks of
// max(64 KiB, ceil(n/sockets)) bytes (NCCL's MIN_CHUNKSIZE) on the data sockets in turn (stripe).
// The poller flushes the last socket before it writes another, so the one reader, taking the
// pieces in the writer's order, never waits for bytes held in a user-space buffer. A probe every
// Timeout/4 reads one byte from each data socket, so an idle one's loss shows too.
//
// Receiver side, the reader stores a frame with a local sender's ordering: LL words with one 8-byte
// store each (the flag inside each half), LL128 lines payload then flag with a release store,
// Simple payload then tail with a release store. So LL128 stays legal across hosts: a line's flag
// is never visible before its 120 bytes, because the far proxy reads the payload only after
// acquiring the flag, sends whole 128-byte lines in order, and the reader reassembles a frame's
// pieces from every socket before it writes the payload and then the release store of the flag
// (a line cut across two sockets is whole before its flag is stored); the receiver acquires the flag
// before reading, as it does for a local sender. The poller watches each local receiver's head and
// sends it back; the far reader stores it (release) into the sender's copy, so the sender never
// runs more than NCCL_STEPS slots ahead of the remote receiver: staging stays bounded as on one
// host.
//
// The proxy polls: it yields while there is work and for 64 empty passes (4 where the waits park
// early, below), then sleeps 20 us,
// doubling up to 500 us, until something moves (2 cores: it does not spin a core forever); a
// frame a reader applies, or a rank that begins to wait (Rank.Poke), wakes it at once.
//
// # Waiting
//
// A Rank is a wire.Parker for the engine's waits: a wait past its yield phase arms the host's bell
// and blocks on it, and the readers ring it after every frame they store that can end a wait (a
// control line that moved only the watchdog's beat or "waits for" cannot, and such a line goes
// out at most every beatLag). Setup.Colocated (COLLPLAN_NET_COLOCATED: how many host processes
// share this machine's cores; collbench --hosts sets it) makes the waits yield 10 us rather than a
// millisecond, the readers wait in Go's poller at once, the proxy stop after 4 empty passes and the
// injected delay's hold sleep, when the colocated hosts' ranks outnumber the cores, so that a host
// process with nothing to do sleeps in the kernel (docs/net-transport.md, "Parked waits"). A write error is a loss only once
// the link's reader has had writeGrace to find the far host's goodbye (writeFailed).
//
// # Injected latency
//
// Setup.Delay (COLLPLAN_NET_DELAY_US, DelayFromEnv; an emulation knob, 0 by default) makes the
// reader hold each frame until the send time in its header plus the delay (hold): from receipt,
// a burst would wait one delay per frame.
//
// # Failures
//
// Every socket has TCP_NODELAY and TCP_USER_TIMEOUT = Setup.Timeout; the poller sends a heartbeat
// on a link idle for Timeout/4, every read has a deadline of Timeout, every flush a write deadline
// of Timeout, dial and accept are bounded by Timeout. A link that fails, or a host that says
// goodbye while one of its ranks is still open, makes this host store the abort word naming that
// host's first rank (wire.AbortHostLost): every local wait ends with an error naming it, and the
// abort goes on to the other hosts. Host.Err names the lost host, its address and its ranks. A link
// whose far end said a clean goodbye (all its ranks closed) fails no more: the heartbeat that then
// finds its socket closed (a broken pipe) loses nothing, and aborted the ranks still open before.
//
// # Set-up
//
// PlacementOf reads a bootstrap.Join roster (hosts = the roster's nodes, consecutive ranks, a
// host's address = the first address its lowest rank advertised); Listen listens on the interface
// NCCL_SOCKET_IFNAME picks (Interface: NCCL's syntax, prefixes, '^' to exclude, '=' for exact, and
// NCCL's automatic order ib, not docker/lo, docker, lo when unset).
//
// # Rank processes
//
// StartRank (procs.go) gives each rank process a Host of its own, NCCL's shape: the host's ranks
// share its segments through shm (each process its own handles on the host's job), and every rank
// process is the proxy of the crossing connections it sends or receives on. Links are by rank:
// every rank process listens (RankPlacementOf: the roster's address of every rank) and has one
// link to each rank process on another host (the higher rank dials), none to its host-mates.
// Connection FROM-TO is copied by FROM's process and TO's process over the link between them.
//
// The invariant: each (remote rank's control line, host) has exactly one writer. A rank process
// mirrors only its own rank's three lines, and only to each other host's applier, that host's
// lowest rank; a reader applies a control line only from the rank its link is to, and only in the
// applier (any other refuses it and aborts). The one writer stores the lines in the order the
// rank's one poller read and sent them on one ordered stream, so a line never rolls back; two
// writers of one line could (the one that lags storing an older descriptor after a newer one).
// The abort word goes on every link and every reader CompareAndSwap(0, v)s it: many writers, the
// first wins. A goodbye carries the rank's state word, since the other processes of the far host
// cannot read it from their copy, which their applier writes from another stream. A lost link
// aborts naming the far rank (AbortWord(rank, AbortHostLost)); a killed rank's host-mates hear of
// it through the other hosts. One Host per host (Start) and rank processes refuse each other in
// the hello (ErrConfig), as does a rank dialled twice.
//
// # Not done
//
// No helper threads: the poller writes and one reader per link reads every socket. Rank processes
// hold a full mesh of links between hosts (ranks x ranks on other hosts, each 1+Sockets sockets,
// each with its heartbeat) where NCCL connects only the peers a channel uses; a frame a reader
// applies wakes only its own process's poller. The proxy relies on a
// sender's plain stores becoming visible in program order (amd64; the race build's stores are
// atomic). The hosts' connection layouts are compared in the hello (the accepting host
// refuses a mismatch with ErrConfig; the dialing host then sees its link closed and aborts), and a
// rank's region size must match Setup.Layout; Setup.Layout equal to Config.Buffers is the caller's. Not wired into engine/launch
// (collbench --hosts uses Start, collbench --hosts --rank-processes StartRank). Rank processes that
// outnumber the cores are slow (about 4 ms per small AllReduce at 2 hosts x 2 on 2 cores, against
// tens of us with one process per host): the proxies' polling yields only with Gosched.
package net
