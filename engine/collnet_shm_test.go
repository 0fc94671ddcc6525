//go:build linux

package engine

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/engine/launch"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/engine/transport/collnet"
	"github.com/collplan/collplan/engine/transport/shm"
)

// TestCollNetEndpointHelper is an aggregation endpoint process of the tests (it skips unless run
// with an address argument, as a Launcher's CollNet command or by hand): it serves on the address
// until SIGTERM or the helpers' limit.
func TestCollNetEndpointHelper(t *testing.T) {
	addr := flag.Arg(0)
	if addr == "" {
		t.Skip("an aggregation endpoint process of the tests")
	}
	ep, err := collnet.ListenCollNet(addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ENDPOINT pid=%d addr=%s\n", os.Getpid(), ep.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(helperLimit):
	}
	ep.Close()
}

// TestShmCollNetProcesses runs CollNetDirect AllReduce with the ranks as processes over shared
// memory and the aggregation endpoint the launcher starts: 4 rank processes in 2 virtual nodes of
// 2 on 2 channels, int32 sum of 1000 elements, each rank checking its result (helperRank: rank r's
// element i is r+i, so the sum is 4i+6); the job's files are removed.
func TestShmCollNetProcesses(t *testing.T) {
	const n = 4
	job := transport.NewJobID(os.Getpid())
	out, errb := &lineBuffer{}, &lineBuffer{}
	l := &launch.Launcher{N: n, Argv: []string{os.Args[0], "-test.run=^TestShmHelperProcess$"},
		Env: append(os.Environ(), envShmHelper+"=rank", envShmCollNet+"=1"), Stdout: out, Stderr: errb,
		Job: job, Bind: launch.BindNone, CollNet: []string{os.Args[0], "-test.run=^TestCollNetEndpointHelper$"}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, l.Run(ctx), "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	assert.Regexp(t, regexp.MustCompile(`ENDPOINT pid=\d+`), out.String())
	assert.Len(t, regexp.MustCompile(`COLLNET rank=\d algo=COLLNET_DIRECT`).FindAllString(out.String(), -1), n, "%s", out.String())
	assert.Regexp(t, regexp.MustCompile(`(?s)(DONE rank=\d.*){4}`), out.String())
	assert.Empty(t, shm.ShmFiles(job), "the job's files are removed")
}

var (
	endpointRE  = regexp.MustCompile(`ENDPOINT pid=(\d+)`)
	rankReadyRE = regexp.MustCompile(`READY rank=(\d+) pid=(\d+) job=(\S+)`)
)

// TestShmCollNetEndpointKilled: kill -9 of the aggregation endpoint while 4 rank processes started
// by hand (no launcher: COLLPLAN_RANK..., and COLLPLAN_COLLNET_ADDR naming an endpoint started by
// hand) run CollNetDirect AllReduce in a loop: every rank process exits with an error within 10 s,
// naming the endpoint, and no segment of the job is left.
func TestShmCollNetEndpointKilled(t *testing.T) {
	addr, err := launch.FreeLoopbackAddr()
	require.NoError(t, err)
	epOut := &lineBuffer{}
	ep := exec.Command(os.Args[0], "-test.run=^TestCollNetEndpointHelper$", addr)
	ep.Stdout, ep.Stderr = epOut, epOut
	require.NoError(t, ep.Start())
	t.Cleanup(func() { ep.Process.Kill(); ep.Wait() })
	waitLines(t, epOut, endpointRE, 1, 30*time.Second)

	rdv, err := launch.FreeLoopbackAddr()
	require.NoError(t, err)
	const n = 4
	out := &lineBuffer{}
	errbs := make([]*lineBuffer, n)
	exits := make(chan error, n)
	for r := range n {
		cmd := helperCommand("rank", "COLLPLAN_RANK="+strconv.Itoa(r), "COLLPLAN_WORLD_SIZE="+strconv.Itoa(n), "COLLPLAN_ADDR="+rdv,
			"COLLPLAN_JOB=", envShmCollNet+"=1", envShmLoop+"=1", collnet.CollNetEnv+"="+addr)
		errbs[r] = &lineBuffer{}
		cmd.Stdout, cmd.Stderr = out, errbs[r]
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill() })
		go func() { exits <- cmd.Wait() }()
	}
	ready := waitLines(t, out, rankReadyRE, n, 30*time.Second)
	job := ready[0][3]
	time.Sleep(100 * time.Millisecond) // the ranks are in their loop
	require.NoError(t, ep.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	for range n {
		select {
		case err := <-exits:
			assert.Error(t, err, "a rank exited cleanly")
		case <-time.After(10*time.Second - time.Since(killed)):
			t.Fatalf("a rank still runs 10 s after the endpoint was killed")
		}
	}
	t.Logf("every rank exited %v after the kill", time.Since(killed))
	for r, b := range errbs {
		assert.Regexp(t, "CollNet (endpoint|aggregation endpoint)", b.String(), "rank %d's error", r)
	}
	assert.Empty(t, shm.ShmFiles(job), "the job's files are removed")
}
