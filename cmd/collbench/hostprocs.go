package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/collplan/collplan/bootstrap"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/engine/transport"
	enet "github.com/collplan/collplan/engine/transport/net"
	"github.com/collplan/collplan/engine/transport/shm"
)

// --hosts H --rank-processes: each rank is its own process in its host's namespaces, as NCCL
// runs them: a host's ranks share its /dev/shm (one shm job per host, whose lock the host's local
// rank 0 creates before the rendezvous), and every rank process runs the network transport's
// proxy for its own connections to other hosts (enet.StartRank). The launcher gives each process
// the host's torchrun variables, its rank and its host's shm job id; the rank's own RANK and
// LOCAL_RANK are given to bootstrap only (in the environment, collbench's own launch would take
// the process for a loopback rank of engine/launch).

const (
	envHostsShmJob = "COLLBENCH_HOSTS_SHM_JOB" // a rank process's host's shm job id
	envHostsProc   = "COLLBENCH_HOSTS_PROC"    // a rank process's rank
)

// rankProcJobs is a fresh shm job id for each of hosts hosts.
func rankProcJobs(hosts int) []string {
	jobs := make([]string, hosts)
	for i := range jobs {
		jobs[i] = transport.NewJobID(os.Getpid())
	}
	return jobs
}

// rankProcEnv is the environment that makes process p of a --rank-processes job rank p.
func rankProcEnv(p, per int, job string) []string {
	return []string{envHostsProc + "=" + strconv.Itoa(p), envHostsShmJob + "=" + job}
}

// runHostRank is one rank process of --hosts --rank-processes.
func runHostRank(ctx context.Context, o *options, n int, hostEnv string, stdout, stderr io.Writer) error {
	per := n / o.hosts
	host, herr := strconv.Atoi(hostEnv)
	rank, rerr := strconv.Atoi(os.Getenv(envHostsProc))
	job := os.Getenv(envHostsShmJob)
	switch {
	case herr != nil || host < 0 || host >= o.hosts:
		return usagef("%s=%q: want a host index below --hosts %d", envHostsRank, hostEnv, o.hosts)
	case rerr != nil || rank < host*per || rank >= (host+1)*per:
		return usagef("%s=%q: want a rank of host %d (%d..%d)", envHostsProc, os.Getenv(envHostsProc), host, host*per, (host+1)*per-1)
	case transport.ValidJobID(job) != nil:
		return usagef("%s=%q: want the host's shm job id", envHostsShmJob, job)
	}
	hostname, _ := os.Hostname()
	own := map[string]string{"RANK": strconv.Itoa(rank), "LOCAL_RANK": strconv.Itoa(rank % per)}
	id, err := bootstrap.FromEnv(func(k string) (string, bool) {
		if v, ok := own[k]; ok {
			return v, true
		}
		return os.LookupEnv(k)
	}, hostname)
	if err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	return runNetRank(ctx, o, netRank{id: id, host: host, job: job,
		transport: fmt.Sprintf("net (%d emulated hosts x %d rank processes, TCP between hosts, shm inside, a proxy per rank)", o.hosts, per)},
		stdout, stderr)
}

// netRank is one rank process of a job across hosts: its identity, its host's index where the
// launcher knows it (-1: the roster's), its host's shm job id where the launcher made one ("": the
// node's local rank 0 makes it, and the roster carries it to the host-mates), and the transport
// line of the preamble.
type netRank struct {
	id        bootstrap.Identity
	host      int
	job       string
	transport string
}

// runNetRank runs one rank process of a job across hosts, as NCCL runs one: a host's ranks share
// its /dev/shm (one shm job per host, whose lock the host's local rank 0 creates before the
// rendezvous, so the host-mates find it after), every rank meets the others through
// bootstrap.Join with its listener's address, and every rank process runs the network
// transport's proxy for its own connections to other hosts (enet.StartRank).
func runNetRank(ctx context.Context, o *options, nr netRank, stdout, stderr io.Writer) (err error) {
	id := nr.id
	n, per, rank := id.Size, id.LocalSize, id.Rank
	defer func() {
		if err != nil {
			err = fmt.Errorf("rank %d: %w", rank, err)
		}
	}()
	cfg, plans, ab, err := o.hostConfig(n)
	if err != nil {
		return err
	}
	// Every rank compiled its tables itself; the rendezvous checks that they are the same.
	digest, err := engine.ConfigHash(n, cfg, o.fingerprint(), fmt.Sprintf("ab %016x %016x", tableHash(ab[0]), tableHash(ab[1])))
	if err != nil {
		return err
	}
	job := nr.job
	if id.LocalRank == 0 {
		if job == "" {
			// No launcher made this host's job: its local rank 0 clears crashed jobs' segments and
			// makes one, which its record carries to the host-mates.
			if _, err := shm.RemoveStaleShm(); err != nil {
				fmt.Fprintln(stderr, "collbench: warning:", err)
			}
			job = transport.NewJobID(os.Getpid())
		}
		// The host's local rank 0 owns its shm job: the lock exists before the rendezvous ends,
		// so the host-mates find it after it; the last process of the host to let go removes the
		// host's segments.
		lock, err := shm.CreateJobLock(job)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := lock.Close(); cerr != nil {
				fmt.Fprintln(stderr, "collbench: warning:", cerr)
			}
		}()
	}
	ln, err := enet.Listen(os.Getenv("NCCL_SOCKET_IFNAME"), 0)
	if err != nil {
		return err
	}
	defer ln.Close()
	self := bootstrap.Endpoint{Addrs: []string{ln.Addr().String()}, Digest: fmt.Sprintf("%016x", digest)}
	if id.LocalRank == 0 && nr.job == "" {
		self.Shm = job
	}
	jctx, cancel := context.WithTimeout(ctx, rendezvousTimeout)
	defer cancel()
	roster, err := bootstrap.Join(jctx, id, self)
	if err != nil {
		return err
	}
	if job == "" {
		local := roster.Local(rank)
		if len(local) == 0 {
			return fmt.Errorf("the roster has no node for rank %d", rank)
		}
		job = roster.Records[local[0]].Endpoint.Shm
		if err := transport.ValidJobID(job); err != nil {
			return fmt.Errorf("rank %d (this node's local rank 0) sent no valid shm job id (%q): %w", local[0], job, err)
		}
	}
	p, err := enet.RankPlacementOf(roster, rank)
	if err != nil {
		return err
	}
	if (nr.host >= 0 && p.Host != nr.host) || p.RanksPerHost != per {
		return fmt.Errorf("the roster places rank %d on host %d at %d ranks per host, want host %d at %d", rank, p.Host, p.RanksPerHost, nr.host, per)
	}
	sockets, err := enet.SocketsFromEnv(os.LookupEnv)
	if err != nil {
		return usagef("%v", err)
	}
	delay, err := enet.DelayFromEnv(os.LookupEnv)
	if err != nil {
		return usagef("%v", err)
	}
	proxy, err := shm.NewShmTransport(job) // the proxy's own handle: it reads ctrl after the rank closed
	if err != nil {
		return err
	}
	defer proxy.Close()
	mine, err := shm.NewShmTransport(job)
	if err != nil {
		return err
	}
	h, err := enet.StartRank(ctx, rank, enet.Setup{Ranks: n, RanksPerHost: per, Listener: ln, Peers: p.Peers,
		Layout: enet.LayoutOf(cfg.Buffers), Timeout: 5 * time.Second, Sockets: sockets, Delay: delay}, proxy)
	if err != nil {
		mine.Close()
		return err
	}
	defer h.Close()
	tr, err := h.Rank(rank, mine)
	if err != nil {
		mine.Close()
		return err
	}
	c, err := engine.New(rank, n, tr, cfg)
	if err != nil {
		mine.Close()
		return err
	}
	hostNames := make([]string, n)
	for _, rec := range roster.Records {
		if rec.Rank >= 0 && rec.Rank < n {
			hostNames[rec.Rank] = rec.Host
		}
	}
	out := io.Discard
	if rank == 0 {
		out = stdout
	}
	bn := &bench{o: o, c: c, out: out, log: &lockedWriter{w: stderr}, plans: plans,
		transport: nr.transport, override: cfg.Override, ab: ab, hostNames: hostNames}
	bn.setPolicy(cfg, rank)
	err = bn.run(ctx)
	if err != nil {
		c.Abort()
	}
	return errors.Join(err, c.Close())
}
