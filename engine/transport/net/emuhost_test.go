package net

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	stdnet "net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/bootstrap"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/emuhost"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/engine/internal/matrix"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/kernels"
)

// The test binary doubles as one emulated host's process (NETTEST_HOST set): it runs that host's
// ranks as goroutines on an in-process local transport, meets the other hosts through
// bootstrap.Join (with COLLPLAN_JOB_SECRET) and talks to them over the lab's bridge.
func TestMain(m *testing.M) {
	if os.Getenv("NETTEST_RANKPROC") != "" { // one rank process (procs_emuhost_test.go)
		if err := rankProcMain(); err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	if os.Getenv("NETTEST_HOST") != "" {
		if err := hostMain(); err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func hostMain() error {
	host, _ := strconv.Atoi(os.Getenv("NETTEST_HOST"))
	per, _ := strconv.Atoi(os.Getenv("NETTEST_PER"))
	hosts, _ := strconv.Atoi(os.Getenv("NETTEST_HOSTS"))
	cfg := engine.Config{RanksPerNode: per, Buffers: tiny}
	if os.Getenv("NETTEST_MATRIX") != "" {
		// The matrix's buffers; a wait that sees no progress for 20 s aborts the case's call.
		cfg = engine.Config{RanksPerNode: per, Buffers: matrix.TinyBuffers(), Timeout: 20 * time.Second}
	}
	h, comms, err := joinHost(host, hosts, cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, c := range comms {
		defer c.Close()
	}
	if s := os.Getenv("NETTEST_MATRIX"); s != "" {
		return matrixHost(h, comms, hosts, cfg.Buffers, s == "short")
	}
	return allReduceHost(comms, per*hosts, os.Getenv("NETTEST_LOOP") == "1")
}

// joinHost starts this host's Host and its cfg.RanksPerNode ranks' communicators.
func joinHost(host, hosts int, cfg engine.Config) (*Host, []*engine.Comm, error) {
	per := cfg.RanksPerNode
	n := per * hosts
	b := cfg.Buffers.WithDefaults()
	// The host listens on an ephemeral port of the interface NCCL_SOCKET_IFNAME picks (host 0: the
	// default order, which passes over lo; host 1: "^lo"), and its ranks meet the others
	// through bootstrap.Join as torchrun's ranks would (RANK, ..., MASTER_ADDR, the job secret);
	// the roster gives every host's listener.
	ln, err := Listen(os.Getenv("NCCL_SOCKET_IFNAME"), 0)
	if err != nil {
		return nil, nil, err
	}
	if got, want := ln.Addr().(*stdnet.TCPAddr).IP.String(), os.Getenv("NETTEST_ADDR"); got != want {
		ln.Close()
		return nil, nil, fmt.Errorf("NCCL_SOCKET_IFNAME %q picked %s, want the lab's address %s", os.Getenv("NCCL_SOCKET_IFNAME"), got, want)
	}
	peers, err := meet(host, per, n, ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	local := transport.NewInProcess()
	h, err := Start(context.Background(), Setup{Host: host, Ranks: n, RanksPerHost: per, Listener: ln, Peers: peers,
		Layout: wire.ConnLayout{LLBytes: int(b.LL), LL128Bytes: int(b.LL128), SimpleBytes: int(b.Simple)}, Timeout: 3 * time.Second}, local.Rank())
	ln.Close()
	if err != nil {
		return nil, nil, err
	}
	comms := make([]*engine.Comm, per)
	for i := range comms {
		r := host*per + i
		tr, err := h.Rank(r, local.Rank())
		if err == nil {
			comms[i], err = engine.New(r, n, tr, cfg)
		}
		if err != nil {
			for _, c := range comms[:i] {
				c.Close()
			}
			h.Close()
			return nil, nil, err
		}
	}
	return h, comms, nil
}

// allReduceHost runs Ring AllReduce with LL, LL128 and Simple on this host's ranks, once each or
// (loop) until the job fails, and prints "running" once all three were right.
func allReduceHost(comms []*engine.Comm, n int, loop bool) error {
	per := len(comms)
	const count = 1531
	sum := make([]int32, count)
	for r := 0; r < n; r++ {
		for i := range sum {
			sum[i] += input(r, i)
		}
	}
	want := string(i32(sum))
	errs := make([]error, per)
	var wg sync.WaitGroup
	var once sync.Once
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.Rank()
			for k := 0; ; k++ {
				p := []costmodel.Proto{costmodel.LL, costmodel.LL128, costmodel.Simple}[k%3]
				c.SetOverride(engine.Pin(costmodel.Ring, p))
				out := make([]byte, 4*count)
				if err := c.AllReduce(context.Background(), i32(inputs(r, count)), out, count, kernels.Int32, kernels.Sum); err != nil {
					errs[i] = fmt.Errorf("rank %d, %v: %w", r, p, err)
					return
				}
				if string(out) != want {
					errs[i] = fmt.Errorf("rank %d, %v: wrong sum", r, p)
					return
				}
				if k == 2 {
					once.Do(func() { fmt.Println("running") })
					if !loop {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// meet runs bootstrap.Join for each of this host's ranks and returns every host's address.
func meet(host, per, n int, addr string) ([]string, error) {
	hostname, _ := os.Hostname()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rosters := make([]bootstrap.Roster, per)
	errs := make([]error, per)
	var wg sync.WaitGroup
	for i := 0; i < per; i++ {
		env := map[string]string{"RANK": strconv.Itoa(host*per + i), "WORLD_SIZE": strconv.Itoa(n), "LOCAL_RANK": strconv.Itoa(i),
			"LOCAL_WORLD_SIZE": strconv.Itoa(per), "GROUP_RANK": strconv.Itoa(host), "MASTER_ADDR": os.Getenv("NETTEST_MASTER"),
			"MASTER_PORT": "29612", bootstrap.EnvSecret: os.Getenv(bootstrap.EnvSecret)}
		id, err := bootstrap.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, hostname)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rosters[i], errs[i] = bootstrap.Join(ctx, id, bootstrap.Endpoint{Addrs: []string{addr}})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	p, err := PlacementOf(rosters[0], host*per)
	if err != nil {
		return nil, err
	}
	if p.Host != host || p.RanksPerHost != per {
		return nil, fmt.Errorf("roster places rank %d on host %d at %d per host, want host %d at %d", host*per, p.Host, p.RanksPerHost, host, per)
	}
	return p.Peers, nil
}

func requireNetns(t *testing.T) {
	t.Helper()
	err := emuhost.Check()
	if err == nil {
		return
	}
	why := err.Error()
	if os.Getenv("COLLPLAN_REQUIRE_NETNS") == "1" {
		t.Fatalf("COLLPLAN_REQUIRE_NETNS=1 but emulated hosts cannot be made here: %s", why)
	}
	t.Skipf("emulated hosts need root and ip netns (%s)", why)
}

type hostProc struct {
	cmd   *exec.Cmd
	lines chan string
	out   strings.Builder
	mu    sync.Mutex
	done  chan error
	eof   chan struct{}  // closed when every line of the output is in out
	stdin io.WriteCloser // the host's standard input (the matrix's hosts exit at its end)
}

// startHosts starts one process per host of lab, each running per ranks; env is added to theirs.
func startHosts(t *testing.T, ctx context.Context, lab *emuhost.Lab, per int, loop bool, env ...string) []*hostProc {
	secret := make([]byte, 16)
	rand.Read(secret)
	procs := make([]*hostProc, lab.Hosts())
	for i := range procs {
		cmd := lab.Command(ctx, i, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "NETTEST_HOST="+strconv.Itoa(i), "NETTEST_PER="+strconv.Itoa(per),
			"NETTEST_HOSTS="+strconv.Itoa(lab.Hosts()), "NETTEST_ADDR="+lab.Addr(i).String(), "NETTEST_MASTER="+lab.Addr(0).String(),
			bootstrap.EnvSecret+"="+hex.EncodeToString(secret), "NCCL_SOCKET_IFNAME="+[]string{"", "^lo"}[min(i, 1)], "NETTEST_LOOP="+map[bool]string{true: "1", false: "0"}[loop])
		cmd.Env = append(cmd.Env, env...)
		pr, pw := io.Pipe()
		cmd.Stdout, cmd.Stderr = pw, pw
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		p := &hostProc{cmd: cmd, lines: make(chan string, 16), done: make(chan error, 1), eof: make(chan struct{}), stdin: stdin}
		go func() {
			defer close(p.eof)
			s := bufio.NewScanner(pr)
			for s.Scan() {
				p.mu.Lock()
				p.out.WriteString(s.Text() + "\n")
				p.mu.Unlock()
				select {
				case p.lines <- s.Text():
				default:
				}
			}
		}()
		require.NoError(t, cmd.Start())
		go func() { err := cmd.Wait(); pw.Close(); p.done <- err }()
		procs[i] = p
	}
	return procs
}

func (p *hostProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func newLab(t *testing.T, hosts int) *emuhost.Lab {
	requireNetns(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lab, err := emuhost.Create(ctx, emuhost.Spec{Hosts: hosts, Name: "nettest"})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, lab.Close()) })
	return lab
}

// TestEmulatedHosts: 2 emulated hosts (network namespaces on a bridge) x 2 ranks, one process per
// host: Ring AllReduce with LL, LL128 and Simple is right on every rank.
func TestEmulatedHosts(t *testing.T) {
	lab := newLab(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, p := range startHosts(t, ctx, lab, 2, false) {
		select {
		case err := <-p.done:
			assert.NoError(t, err, "host %d: %s", i, p.output())
		case <-ctx.Done():
			t.Fatalf("host %d still running: %s", i, p.output())
		}
	}
}

// TestEmulatedHostLost: while both hosts run AllReduce in a loop, host 1's process is killed
// (SIGKILL) or its link goes down: host 0's ranks end within 10 s with the abort naming rank 2.
func TestEmulatedHostLost(t *testing.T) {
	for _, how := range []string{"kill", "linkdown"} {
		t.Run(how, func(t *testing.T) {
			lab := newLab(t, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			procs := startHosts(t, ctx, lab, 2, true)
			for i, p := range procs {
				select {
				case l := <-p.lines:
					require.Equal(t, "running", l, "host %d: %s", i, p.output())
				case <-time.After(30 * time.Second):
					t.Fatalf("host %d not running: %s", i, p.output())
				}
			}
			t0 := time.Now()
			if how == "kill" {
				require.NoError(t, procs[1].cmd.Process.Kill())
			} else {
				require.NoError(t, lab.LinkDown(ctx, 1))
			}
			select {
			case err := <-procs[0].done:
				took := time.Since(t0)
				require.Error(t, err, "host 0 exits 3")
				out := procs[0].output()
				assert.Contains(t, out, "rank 2: lost: the net transport's link to its host failed")
				assert.Less(t, took, 10*time.Second)
				t.Logf("host 0 after %v: %s", took, strings.TrimSpace(out))
			case <-time.After(15 * time.Second):
				t.Fatalf("host 0 still running 15 s after host 1 went: %s", procs[0].output())
			}
		})
	}
}
