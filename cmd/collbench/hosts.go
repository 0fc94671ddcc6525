package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	stdnet "net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/collplan/collplan/bootstrap"
	"github.com/collplan/collplan/emuhost"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/engine/transport/collnet"
	enet "github.com/collplan/collplan/engine/transport/net"
	"github.com/collplan/collplan/planner"
)

// --hosts H: a job across H emulated hosts (package emuhost: one network namespace, hostname and
// /dev/shm per host on a private bridge, so nothing crosses between hosts but TCP). The launcher
// makes the lab, starts one collbench process per host with torchrun's variables (GROUP_RANK,
// LOCAL_WORLD_SIZE, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and a fresh COLLPLAN_JOB_SECRET, prints
// host 0's table, and removes the lab. In each host process the host's -np/H ranks are goroutines
// over an in-process local transport, each meets the others through bootstrap.Join as a torchrun
// rank would, and the hosts' connections cross on the network transport (engine/transport/net).
// The planner prices the job as H nodes of -np/H ranks; where it (or --algo) may run CollNet, host 0
// serves the aggregation endpoint on the lab's network.

const (
	envHostsRank = "COLLBENCH_HOSTS_RANK" // set in a host process: its host index
	hostsPort    = 29611                  // the rendezvous port on host 0 (each lab is its own network)
)

// checkHosts validates --hosts against the other flags for n ranks and fixes the ranks per node.
func (o *options) checkHosts(n int) error {
	switch {
	case o.hosts < 0 || o.hosts > emuhost.MaxHosts:
		return fmt.Errorf("--hosts %d: want 1..%d emulated hosts", o.hosts, emuhost.MaxHosts)
	case n%o.hosts != 0:
		return fmt.Errorf("--hosts %d: -np %d does not spread evenly over the hosts", o.hosts, n)
	case o.rpn != 0 && o.rpn != n/o.hosts:
		return fmt.Errorf("--hosts %d: --ranks-per-node %d, but each host holds %d of the %d ranks (the network transport's nodes are the hosts)", o.hosts, o.rpn, n/o.hosts, n)
	case o.device != "cpu":
		return errors.New("--hosts runs the engine on CPUs (--device cpu)")
	case o.rankProcs && o.pinsCollNet():
		return fmt.Errorf("--rank-processes: --algo %s: CollNet is not run with rank processes (use --hosts without it)", o.algo)
	}
	// The host processes inherit the environment: a bad socket count or delay is refused here,
	// before any host starts.
	if _, err := enet.SocketsFromEnv(os.LookupEnv); err != nil {
		return fmt.Errorf("--hosts: %w", err)
	}
	if _, err := enet.DelayFromEnv(os.LookupEnv); err != nil {
		return fmt.Errorf("--hosts: %w", err)
	}
	if _, err := enet.ColocatedFromEnv(os.LookupEnv); err != nil {
		return fmt.Errorf("--hosts: %w", err)
	}
	o.rpn = n / o.hosts
	return nil
}

// runHosts is the launcher of --hosts: the lab, one process per host, host 0's table on stdout.
func runHosts(ctx context.Context, o *options, n int, args []string, stdout, stderr io.Writer) error {
	exe, err := selfExe()
	if err != nil {
		return fmt.Errorf("finding collbench's executable: %w", err)
	}
	lctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	lab, err := emuhost.Create(lctx, emuhost.Spec{Hosts: o.hosts, Name: "cb"})
	cancel()
	if err != nil {
		return runtimeError{fmt.Errorf("--hosts %d: %w", o.hosts, err)}
	}
	defer func() {
		if err := lab.Close(); err != nil {
			fmt.Fprintln(stderr, "collbench: warning:", err)
		}
	}()
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	jctx, stop := context.WithCancel(ctx)
	defer stop()
	per := n / o.hosts
	errs := make([]error, o.hosts)
	var wg, logs sync.WaitGroup // the hosts' processes; their stderr copied to ours
	defer logs.Wait()           // every host's last lines are out before the job's error
	var firstErr sync.Once
	logw := &lockedWriter{w: stderr}
	procs := gomaxprocsPerHost(o.hosts)
	nproc := o.hosts // one process per host, or (--rank-processes) per rank, each with its share of Ps
	if o.rankProcs {
		nproc, procs = n, max(1, procs/per)
	}
	jobs := rankProcJobs(o.hosts)
	errs = make([]error, nproc)
	for p := range nproc {
		h := p
		if o.rankProcs {
			h = p / per
		}
		cmd := lab.Command(jctx, h, exe, args...)
		cmd.Env = append(os.Environ(), envHostsRank+"="+strconv.Itoa(h),
			// The hosts share this machine's cores: each host process gets its share of them as Ps
			// (unless GOMAXPROCS is set), so that H processes' polling threads do not outnumber
			// the cores. With 2 Ps each, 2 hosts' 8-byte AllReduce took 1-2.4 ms; with 1, 35-65 us.
			"GOMAXPROCS="+strconv.Itoa(procs),
			// and their transports know it (waits park rather than yield when the hosts' ranks
			// outnumber the cores), unless the environment says otherwise.
			enet.EnvColocated+"="+colocated(o.hosts),
			"GROUP_RANK="+strconv.Itoa(h), "WORLD_SIZE="+strconv.Itoa(n), "LOCAL_WORLD_SIZE="+strconv.Itoa(per),
			"MASTER_ADDR="+lab.Addr(0).String(), "MASTER_PORT="+strconv.Itoa(hostsPort),
			bootstrap.EnvSecret+"="+hex.EncodeToString(secret))
		name := fmt.Sprintf("host %d", h)
		if o.rankProcs {
			cmd.Env = append(cmd.Env, rankProcEnv(p, per, jobs[h])...)
			name = fmt.Sprintf("host %d rank %d", h, p)
		}
		cmd.Stdout = io.Discard
		if p == 0 {
			cmd.Stdout = stdout
		}
		pr, pw := io.Pipe()
		cmd.Stderr = pw
		logs.Go(func() { prefixLines(pr, logw, fmt.Sprintf("%s (%s): ", name, lab.Hostname(h))) })
		if err := cmd.Start(); err != nil {
			pw.Close()
			stop() // the hosts started so far are killed, and their stderr ends, before logs.Wait
			wg.Wait()
			return fmt.Errorf("--hosts: starting %s: %w", name, err)
		}
		wg.Go(func() {
			err := cmd.Wait()
			pw.Close()
			if err != nil {
				errs[p] = fmt.Errorf("%s: %w", name, err)
				// The others end on their own (their transports see the host go), within
				// the watchdog; the context kills what is left after a grace.
				firstErr.Do(func() { time.AfterFunc(15*time.Second, stop) })
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// colocated is COLLPLAN_NET_COLOCATED for the host processes of a lab of hosts: the environment's,
// else the lab's host count (every host of the lab shares this machine's cores).
func colocated(hosts int) string {
	if v, ok := os.LookupEnv(enet.EnvColocated); ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v)
	}
	return strconv.Itoa(hosts)
}

// gomaxprocsPerHost is GOMAXPROCS for each of hosts host processes: the environment's, else the
// machine's cores shared evenly, at least 1.
func gomaxprocsPerHost(hosts int) int {
	if v, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); err == nil && v > 0 {
		return v
	}
	return max(1, runtime.NumCPU()/hosts)
}

// prefixLines copies r to w line by line, each behind prefix.
func prefixLines(r io.Reader, w io.Writer, prefix string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fmt.Fprintf(w, "%s%s\n", prefix, sc.Text())
	}
	io.Copy(io.Discard, r) // past a line over 1 MiB: keep draining, so the writer never blocks
}

// hostConfig is a --hosts process's engine configuration, its plans line and --ab's two tables.
func (o *options) hostConfig(n int) (engine.Config, string, [2]*planner.DecisionTable, error) {
	var ab [2]*planner.DecisionTable
	cfg, plans, err := o.engineConfig(n)
	if err == nil && len(o.ab) > 0 {
		ab, err = o.abTables(n)
	}
	return cfg, plans, ab, err
}

// runHost is one host process of --hosts: its ranks as goroutines, meeting every rank of the job
// through bootstrap.Join and crossing to the other hosts on the network transport.
func runHost(ctx context.Context, o *options, n int, hostEnv string, stdout, stderr io.Writer) error {
	host, err := strconv.Atoi(hostEnv)
	if err != nil || host < 0 || host >= o.hosts {
		return usagef("%s=%q: want a host index below --hosts %d", envHostsRank, hostEnv, o.hosts)
	}
	per := n / o.hosts
	cfg, plans, ab, err := o.hostConfig(n)
	if err != nil {
		return err
	}
	// CollNet's aggregation endpoint, where a pin or the tables may run CollNet: host 0 serves it
	// on the lab's network, at the port after the rendezvous's, where every host finds it.
	if cfg.CollNet.Addr == "" && (o.pinsCollNet() || plansCollNet(append(cfg.Tables, ab[0], ab[1]))) {
		cfg.CollNet.Addr = stdnet.JoinHostPort(os.Getenv("MASTER_ADDR"), strconv.Itoa(hostsPort+1))
		if host == 0 {
			ep, err := collnet.ListenCollNet(cfg.CollNet.Addr)
			if err != nil {
				return fmt.Errorf("host 0: %w", err)
			}
			defer ep.Close()
		}
	}
	ln, err := enet.Listen(os.Getenv("NCCL_SOCKET_IFNAME"), 0)
	if err != nil {
		return fmt.Errorf("host %d: %w", host, err)
	}
	defer ln.Close()
	hostname, _ := os.Hostname()
	jctx, cancel := context.WithTimeout(ctx, rendezvousTimeout)
	defer cancel()
	rosters := make([]bootstrap.Roster, per)
	errs := make([]error, per)
	var wg sync.WaitGroup
	for i := range per {
		// Each rank's identity as torchrun gives it to one process per rank: the host process
		// was started with the host's variables, and the ranks' own (RANK, LOCAL_RANK) are theirs.
		own := map[string]string{"RANK": strconv.Itoa(host*per + i), "LOCAL_RANK": strconv.Itoa(i)}
		id, err := bootstrap.FromEnv(func(k string) (string, bool) {
			if v, ok := own[k]; ok {
				return v, true
			}
			return os.LookupEnv(k)
		}, hostname)
		if err != nil {
			return fmt.Errorf("host %d: %w", host, err)
		}
		wg.Go(func() {
			rosters[i], errs[i] = bootstrap.Join(jctx, id, bootstrap.Endpoint{Addrs: []string{ln.Addr().String()}})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("host %d: %w", host, err)
	}
	p, err := enet.PlacementOf(rosters[0], host*per)
	if err != nil {
		return fmt.Errorf("host %d: %w", host, err)
	}
	if p.Host != host || p.RanksPerHost != per {
		return fmt.Errorf("host %d: the roster places rank %d on host %d at %d ranks per host, want host %d at %d",
			host, host*per, p.Host, p.RanksPerHost, host, per)
	}
	sockets, err := enet.SocketsFromEnv(os.LookupEnv)
	if err != nil {
		return usagef("host %d: %v", host, err)
	}
	delay, err := enet.DelayFromEnv(os.LookupEnv)
	if err != nil {
		return usagef("host %d: %v", host, err)
	}
	colo, err := enet.ColocatedFromEnv(os.LookupEnv)
	if err != nil {
		return usagef("host %d: %v", host, err)
	}
	local := transport.NewInProcess()
	h, err := enet.Start(ctx, enet.Setup{Host: host, Ranks: n, RanksPerHost: per, Listener: ln, Peers: p.Peers,
		Layout: enet.LayoutOf(cfg.Buffers), Timeout: 5 * time.Second, Sockets: sockets, Delay: delay, Colocated: colo}, local.Rank())
	if err != nil {
		return fmt.Errorf("host %d: %w", host, err)
	}
	defer h.Close()
	comms := make([]*engine.Comm, per)
	for i := range comms {
		r := host*per + i
		tr, err := h.Rank(r, local.Rank())
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
		if comms[i], err = engine.New(r, n, tr, cfg); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
		defer comms[i].Close()
	}
	hostNames := make([]string, n)
	for _, rec := range rosters[0].Records {
		if rec.Rank >= 0 && rec.Rank < n {
			hostNames[rec.Rank] = rec.Host
		}
	}
	logw := &lockedWriter{w: stderr}
	transportName := fmt.Sprintf("net (%d emulated hosts x %d ranks, TCP between hosts, in-process inside)", o.hosts, per)
	runErrs := make([]error, per)
	for i, c := range comms {
		out := io.Discard
		if host == 0 && i == 0 {
			out = stdout
		}
		bn := &bench{o: o, c: c, out: out, log: logw, plans: plans, transport: transportName, override: cfg.Override, ab: ab,
			hostNames: hostNames}
		bn.setPolicy(cfg, c.Rank())
		wg.Go(func() {
			if runErrs[i] = bn.run(ctx); runErrs[i] != nil {
				c.Abort()
			}
		})
	}
	wg.Wait()
	for i, err := range runErrs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", host*per+i, err)
		}
	}
	return nil
}
