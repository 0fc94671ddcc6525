//go:build unix

package net

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
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
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/engine/transport/shm"
	"github.com/collplan/collplan/kernels"
)

// The test binary doubles as one rank process (NETTEST_RANKPROC set, TestMain): torchrun's
// variables, its host's shm job (NETTEST_JOB; the host's local rank 0 creates its lock), a
// listener of its own, bootstrap.Join, StartRank, and AllReduce with LL, LL128 and Simple in turn.
func rankProcMain() error {
	env := func(k string) int { v, _ := strconv.Atoi(os.Getenv(k)); return v }
	rank, n, local, per := env("RANK"), env("WORLD_SIZE"), env("LOCAL_RANK"), env("LOCAL_WORLD_SIZE")
	loop := os.Getenv("NETTEST_LOOP") == "1"
	job := os.Getenv("NETTEST_JOB")
	if local == 0 {
		lock, err := shm.CreateJobLock(job)
		if err != nil {
			return err
		}
		defer lock.Close()
	}
	ln, err := Listen(os.Getenv("NCCL_SOCKET_IFNAME"), 0)
	if err != nil {
		return err
	}
	hostname, _ := os.Hostname()
	id, err := bootstrap.FromEnv(os.LookupEnv, hostname)
	if err != nil {
		ln.Close()
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	roster, err := bootstrap.Join(ctx, id, bootstrap.Endpoint{Addrs: []string{ln.Addr().String()}})
	if err != nil {
		ln.Close()
		return err
	}
	p, err := RankPlacementOf(roster, rank)
	if err != nil {
		ln.Close()
		return err
	}
	if p.RanksPerHost != per || p.Host != rank/per {
		ln.Close()
		return fmt.Errorf("roster places rank %d on host %d at %d per host, want host %d at %d", rank, p.Host, p.RanksPerHost, rank/per, per)
	}
	// The host's lock exists: local rank 0 made it before it joined.
	proxy, err := shm.NewShmTransport(job)
	if err != nil {
		ln.Close()
		return err
	}
	defer proxy.Close()
	own, err := shm.NewShmTransport(job)
	if err != nil {
		ln.Close()
		return err
	}
	h, err := StartRank(context.Background(), rank, Setup{Ranks: n, RanksPerHost: per, Listener: ln, Peers: p.Peers,
		Layout: LayoutOf(tiny), Timeout: 3 * time.Second}, proxy)
	ln.Close()
	if err != nil {
		own.Close()
		return err
	}
	defer h.Close()
	tr, err := h.Rank(rank, own)
	if err != nil {
		own.Close()
		return err
	}
	c, err := engine.New(rank, n, tr, engine.Config{RanksPerNode: per, Buffers: tiny})
	if err != nil {
		own.Close()
		return err
	}
	defer c.Close()
	const count = 1531
	sum := make([]int32, count)
	for r := 0; r < n; r++ {
		for i := range sum {
			sum[i] += input(r, i)
		}
	}
	want := string(i32(sum))
	for k := 0; ; k++ {
		pr := []costmodel.Proto{costmodel.LL, costmodel.LL128, costmodel.Simple}[k%3]
		c.SetOverride(engine.Pin(costmodel.Ring, pr))
		out := make([]byte, 4*count)
		if err := c.AllReduce(context.Background(), i32(inputs(rank, count)), out, count, kernels.Int32, kernels.Sum); err != nil {
			return fmt.Errorf("rank %d, %v: %w", rank, pr, err)
		}
		if string(out) != want {
			return fmt.Errorf("rank %d, %v: wrong sum", rank, pr)
		}
		if k == 2 {
			fmt.Println("running")
			if !loop {
				return nil
			}
		}
	}
}

// startRankProcs starts hosts x per rank processes, each in its host's namespaces, with
// torchrun's variables and nothing else of collplan's but the job secret.
func startRankProcs(t *testing.T, ctx context.Context, lab *emuhost.Lab, per int, loop bool) []*hostProc {
	secret := make([]byte, 16)
	rand.Read(secret)
	n := lab.Hosts() * per
	jobs := make([]string, lab.Hosts())
	for i := range jobs {
		jobs[i] = transport.NewJobID(os.Getpid())
	}
	procs := make([]*hostProc, n)
	for r := range procs {
		host := r / per
		cmd := lab.Command(ctx, host, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "NETTEST_RANKPROC=1", "NETTEST_JOB="+jobs[host],
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n), "LOCAL_RANK="+strconv.Itoa(r%per),
			"LOCAL_WORLD_SIZE="+strconv.Itoa(per), "GROUP_RANK="+strconv.Itoa(host), "MASTER_ADDR="+lab.Addr(0).String(),
			"MASTER_PORT=29613", bootstrap.EnvSecret+"="+hex.EncodeToString(secret),
			"NCCL_SOCKET_IFNAME="+[]string{"", "^lo"}[min(host, 1)], "NETTEST_LOOP="+map[bool]string{true: "1", false: "0"}[loop])
		pr, pw := io.Pipe()
		cmd.Stdout, cmd.Stderr = pw, pw
		p := &hostProc{cmd: cmd, lines: make(chan string, 16), done: make(chan error, 1)}
		go func() {
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
		procs[r] = p
	}
	return procs
}

// TestEmulatedRankProcesses: 2 emulated hosts x 2 rank processes (StartRank, each its own shm
// handles on its host's job and its own proxy), meeting through bootstrap.Join with torchrun's
// variables: Ring AllReduce with LL, LL128 and Simple is right on every rank.
func TestEmulatedRankProcesses(t *testing.T) {
	lab := newLab(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for r, p := range startRankProcs(t, ctx, lab, 2, false) {
		select { // the line that says its three calls were right (a binary that ran no rank would exit 0 too)
		case l := <-p.lines:
			require.Equal(t, "running", l, "rank %d: %s", r, p.output())
		case <-ctx.Done():
			t.Fatalf("rank %d did not run: %s", r, p.output())
		}
		select {
		case err := <-p.done:
			assert.NoError(t, err, "rank %d: %s", r, p.output())
		case <-ctx.Done():
			t.Fatalf("rank %d still running: %s", r, p.output())
		}
	}
}

// TestEmulatedRankProcessKilled: while 2 hosts x 2 rank processes run AllReduce in a loop, one
// rank process is killed (SIGKILL: host 1's applier, rank 2, or rank 3): every other rank process
// exits within 10 s with the abort naming the killed rank, its host-mate too.
func TestEmulatedRankProcessKilled(t *testing.T) {
	for _, victim := range []int{2, 3} {
		t.Run(fmt.Sprintf("rank=%d", victim), func(t *testing.T) {
			lab := newLab(t, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			procs := startRankProcs(t, ctx, lab, 2, true)
			for r, p := range procs {
				select {
				case l := <-p.lines:
					require.Equal(t, "running", l, "rank %d: %s", r, p.output())
				case <-time.After(30 * time.Second):
					t.Fatalf("rank %d not running: %s", r, p.output())
				}
			}
			t0 := time.Now()
			require.NoError(t, procs[victim].cmd.Process.Kill())
			var wg sync.WaitGroup
			for r, p := range procs {
				if r == victim {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					select {
					case err := <-p.done:
						took := time.Since(t0)
						assert.Error(t, err, "rank %d exits 3", r)
						out := p.output()
						assert.Contains(t, out, fmt.Sprintf("rank %d: lost: the net transport's link to its host failed", victim), "rank %d", r)
						assert.Less(t, took, 10*time.Second, "rank %d", r)
						t.Logf("rank %d after %v: %s", r, took, strings.TrimSpace(out))
					case <-time.After(15 * time.Second):
						t.Errorf("rank %d still running 15 s after rank %d was killed: %s", r, victim, p.output())
					}
				}()
			}
			wg.Wait()
		})
	}
}
