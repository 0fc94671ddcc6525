//go:build unix

package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collplan/collplan/kernels"
)

// The shared-memory tests run ranks as processes: this test binary, re-run with
// envShmHelper naming what to be (TestShmHelperProcess).
const (
	envShmHelper = "COLLPLAN_SHM_HELPER" // rank
	envShmGo     = "COLLPLAN_SHM_GO"     // rank: wait for this file after the first call, then finish
	envShmLoop   = "COLLPLAN_SHM_LOOP"   // rank: call until the communicator fails
	envShmBig    = "COLLPLAN_SHM_BIG"    // rank: NCCL's default buffers instead of tiny ones
	helperLimit  = 60 * time.Second      // no helper waits longer for anything
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
// 0 of a job started by hand (no COLLPLAN_JOB) clears stale segments, and removes the job's files
// when it closes.
func helperJoin(env Env, cfgHash uint64) (string, *ShmTransport, func() error, error) {
	release := func() error { return nil }
	if env.Rank == 0 && env.Job == "" {
		if _, err := RemoveStaleShm(); err != nil {
			fmt.Fprintln(os.Stderr, "warning:", err)
		}
	}
	job, err := Rendezvous(context.Background(), env.Rank, env.Size, env.Addr, cfgHash, env.Job, helperLimit/2)
	if err != nil {
		return "", nil, release, err
	}
	tr, err := NewShmTransport(job, env.Job == "" && env.Rank == 0)
	return job, tr, release, err
}

// helperRank is one rank of a job: it all-reduces once, says READY, then (envShmGo) waits for the
// go file and all-reduces three more times, or (envShmLoop) all-reduces until that fails.
func helperRank() (err error) {
	env, ok, err := EnvFrom(os.Getenv)
	if err != nil || !ok {
		return fmt.Errorf("not a rank (%v)", err)
	}
	cfg := Config{Buffers: tinyBuffers()}
	if os.Getenv(envShmBig) == "1" {
		cfg = Config{}
	}
	h, err := ConfigHash(env.Size, cfg)
	if err != nil {
		return err
	}
	job, tr, release, err := helperJoin(env, h)
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
