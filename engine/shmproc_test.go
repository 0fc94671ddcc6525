//go:build unix

package engine

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/launch"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/engine/transport/collnet"
	"github.com/collplan/collplan/engine/transport/shm"
	"github.com/collplan/collplan/kernels"
)

// The shared-memory tests run ranks and lock holders as processes: this test binary, re-run with
// envShmHelper naming what to be (TestShmHelperProcess).
const (
	envShmHelper   = "COLLPLAN_SHM_HELPER"      // rank, hold or nsdriver
	envShmGo       = "COLLPLAN_SHM_GO"          // rank: wait for this file after the first call, then finish
	envShmLoop     = "COLLPLAN_SHM_LOOP"        // rank: call until the communicator fails
	envShmBig      = "COLLPLAN_SHM_BIG"         // rank: NCCL's default buffers instead of tiny ones
	envShmNVLS     = "COLLPLAN_SHM_NVLS"        // rank: pin NVLS/Simple, and report the traffic (NVLS line)
	envShmNVLSTree = "COLLPLAN_SHM_NVLSTREE"    // rank: pin NVLSTree/Simple in nodes of 2 ranks, and report the traffic (NVLS line)
	envShmCollNet  = "COLLPLAN_SHM_COLLNET"     // rank: pin CollNetDirect/Simple in nodes of 2 ranks (the endpoint: COLLPLAN_COLLNET_ADDR)
	envShmOwner    = "COLLPLAN_SHM_OWNER"       // hold: create the job's lock first
	envShmLastPid  = "COLLPLAN_SHM_NS_LAST_PID" // nsdriver: where the namespace's pids start
	helperLimit    = 60 * time.Second           // no helper waits longer for anything
)

// TestShmHelperProcess is a helper process of the shared-memory tests; it skips unless started as
// one.
func TestShmHelperProcess(t *testing.T) {
	mode := os.Getenv(envShmHelper)
	if mode == "" {
		t.Skip("a helper process of the shared-memory tests")
	}
	var err error
	switch mode {
	case "rank":
		err = helperRank()
	case "hold":
		err = helperHold()
	case "nsdriver":
		err = helperNSDriver()
	default:
		err = fmt.Errorf("unknown %s=%q", envShmHelper, mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "shm helper %s (pid %d): %v\n", mode, os.Getpid(), err)
		os.Exit(1)
	}
	os.Exit(0)
}

// helperCommand returns a command that runs this test binary as a helper of the given mode.
func helperCommand(mode string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestShmHelperProcess$")
	cmd.Env = append(append(os.Environ(), envShmHelper+"="+mode), env...)
	return cmd
}

// helperJoin is what a rank process does before New, as collbench's runRankProcess does it: rank
// 0 of a job started by hand (no COLLPLAN_JOB) clears stale segments, creates the job's id and lock
// and hands the id out at the rendezvous; every rank then opens its transport.
func helperJoin(env launch.Env, cfgHash uint64) (string, *shm.ShmTransport, func() error, error) {
	job, release := env.Job, func() error { return nil }
	if env.Rank == 0 && job == "" {
		if _, err := shm.RemoveStaleShm(); err != nil {
			fmt.Fprintln(os.Stderr, "warning:", err)
		}
		lock, err := shm.CreateJobLock(transport.NewJobID(os.Getpid()))
		if err != nil {
			return "", nil, release, err
		}
		job, release = lock.Job(), lock.Close
	}
	job, err := Rendezvous(context.Background(), env.Rank, env.Size, env.Addr, cfgHash, job, helperLimit/2)
	if err != nil {
		return "", nil, release, err
	}
	tr, err := shm.NewShmTransport(job)
	return job, tr, release, err
}

// helperRank is one rank of a job: it all-reduces once, says READY, then (envShmGo) waits for the
// go file and all-reduces three more times, or (envShmLoop) all-reduces until that fails.
func helperRank() (err error) {
	env, ok, err := launch.EnvFrom(os.Getenv)
	if err != nil || !ok {
		return fmt.Errorf("not a rank (%v)", err)
	}
	cfg := Config{Buffers: tinyBuffers()}
	if os.Getenv(envShmBig) == "1" {
		cfg = Config{}
	}
	nvls := os.Getenv(envShmNVLS) == "1"
	if nvls {
		cfg.Override = Pin(costmodel.NVLS, costmodel.Simple)
		cfg.Override.Channels = 2
	}
	if os.Getenv(envShmNVLSTree) == "1" {
		nvls = true
		cfg.RanksPerNode = 2
		cfg.Override = Pin(costmodel.NVLSTree, costmodel.Simple)
		cfg.Override.Channels = 2
	}
	isCollNet := os.Getenv(envShmCollNet) == "1"
	if isCollNet {
		cfg.RanksPerNode = 2
		cfg.Override = Pin(costmodel.CollNetDirect, costmodel.Simple)
		cfg.Override.Channels = 2
	}
	h, err := ConfigHash(env.Size, cfg)
	if err != nil {
		return err
	}
	job, tr, release, err := helperJoin(env, h)
	cfg.CollNet = CollNetConfig{Addr: os.Getenv(collnet.CollNetEnv), Job: job}
	defer func() {
		if rerr := release(); err == nil {
			err = rerr
		}
	}()
	if err != nil {
		return err
	}
	c, err := New(env.Rank, env.Size, tr, cfg)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}()
	const count = 1000
	allReduce := func() error {
		b := make([]byte, 4*count)
		for i := range count {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(env.Rank+i))
		}
		if err := c.AllReduce(context.Background(), b, b, count, kernels.Int32, kernels.Sum); err != nil {
			return err
		}
		for i := range count {
			if got, want := binary.LittleEndian.Uint32(b[4*i:]), uint32(env.Size*i+env.Size*(env.Size-1)/2); got != want {
				return fmt.Errorf("element %d: %d, want %d", i, got, want)
			}
		}
		return nil
	}
	if err := allReduce(); err != nil {
		return err
	}
	if nvls {
		var tot ChannelStats
		for _, s := range c.Stats() {
			tot.Add(s)
		}
		fmt.Printf("NVLS rank=%d algo=%v p2p=%d ld=%d st=%d\n", env.Rank, c.LastPlan().Algo,
			tot.PayloadBytes+tot.RecvBytes+tot.WireBytes, tot.LdReduceBytes, tot.StBytes)
	}
	if isCollNet {
		fmt.Printf("COLLNET rank=%d algo=%v\n", env.Rank, c.LastPlan().Algo)
	}
	fmt.Printf("READY rank=%d pid=%d job=%s\n", env.Rank, os.Getpid(), job)
	deadline := time.Now().Add(helperLimit)
	switch {
	case os.Getenv(envShmLoop) == "1":
		for time.Now().Before(deadline) {
			if err := allReduce(); err != nil {
				return err
			}
		}
		return errors.New("still running after the helpers' limit")
	case os.Getenv(envShmGo) != "":
		for {
			if _, err := os.Stat(os.Getenv(envShmGo)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no %s after %v", os.Getenv(envShmGo), helperLimit)
			}
			time.Sleep(10 * time.Millisecond)
		}
		for range 3 {
			if err := allReduce(); err != nil {
				return err
			}
		}
	}
	fmt.Printf("DONE rank=%d\n", env.Rank)
	return nil
}

// helperHold is a process of job COLLPLAN_JOB that maps two of its regions (after creating the
// job's lock, with envShmOwner), says READY and closes its transport when its standard input
// ends or says "close".
func helperHold() error {
	job := os.Getenv("COLLPLAN_JOB")
	release := func() error { return nil }
	if os.Getenv(envShmOwner) == "1" {
		lock, err := shm.CreateJobLock(job)
		if err != nil {
			return err
		}
		release = lock.Close
	}
	tr, err := shm.NewShmTransport(job)
	if err != nil {
		release()
		return err
	}
	for _, name := range []string{transport.CtrlRegion, transport.ConnRegion(0, 0, 1)} {
		r, err := tr.Region(name, 4096)
		if err != nil {
			tr.Close()
			release()
			return err
		}
		r[0] = 1
	}
	fmt.Printf("READY pid=%d\n", os.Getpid())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() && sc.Text() != "close" {
	}
	err = errors.Join(tr.Close(), release())
	fmt.Println("CLOSED")
	return err
}

// helperNSDriver runs a 2-rank job started by hand (as mpirun would) from inside a PID namespace:
// it is the namespace's init; it moves the namespace's next pid to envShmLastPid+1 so that the
// ranks' pids are ones that no process outside has, then starts the ranks and waits for them.
func helperNSDriver() error {
	if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(os.Getenv(envShmLastPid)), 0); err != nil {
		return err
	}
	addr, err := launch.FreeLoopbackAddr()
	if err != nil {
		return err
	}
	cmds := make([]*exec.Cmd, 2)
	for r := range cmds {
		cmd := helperCommand("rank", "COLLPLAN_RANK="+strconv.Itoa(r), "COLLPLAN_WORLD_SIZE=2", "COLLPLAN_ADDR="+addr, "COLLPLAN_JOB=")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		cmds[r] = cmd
	}
	timer := time.AfterFunc(helperLimit, func() {
		for _, cmd := range cmds {
			cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	var errs []error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	return errors.Join(errs...)
}

// lineBuffer collects a helper's output for the test to read while the helper runs.
type lineBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lineBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lineBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitLines waits (bounded) until out has n matches of re and returns them.
func waitLines(t *testing.T, out fmt.Stringer, re *regexp.Regexp, n int, limit time.Duration) [][]string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		m := re.FindAllStringSubmatch(out.String(), -1)
		if len(m) >= n {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d lines matching %s after %v:\n%s", len(m), n, re, limit, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holder is a running helperHold process.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *lineBuffer
}

var readyRE = regexp.MustCompile(`READY pid=(\d+)`)

// startHolder starts a helperHold process for job and waits until it has mapped its regions.
func startHolder(t *testing.T, job string, owner bool) *holder {
	t.Helper()
	h := &holder{out: &lineBuffer{}}
	h.cmd = helperCommand("hold", "COLLPLAN_JOB="+job, envShmOwner+"="+map[bool]string{true: "1"}[owner])
	h.cmd.Stdout, h.cmd.Stderr = h.out, h.out
	var err error
	h.stdin, err = h.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, h.cmd.Start())
	t.Cleanup(func() { h.cmd.Process.Kill(); h.cmd.Wait() })
	waitLines(t, h.out, readyRE, 1, 30*time.Second)
	return h
}

// kill kills the holder with SIGKILL and reaps it.
func (h *holder) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, h.cmd.Process.Signal(syscall.SIGKILL))
	h.cmd.Wait()
}

// close makes the holder close its transport and waits (bounded) for it to exit cleanly.
func (h *holder) close(t *testing.T) {
	t.Helper()
	fmt.Fprintln(h.stdin, "close")
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "%s", h.out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("holder %d did not close within 30 s:\n%s", h.cmd.Process.Pid, h.out.String())
	}
}
