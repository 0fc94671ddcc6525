package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/launch"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/engine/transport/shm"
	"github.com/collplan/collplan/planner"
)

// TestMain makes the test binary a collbench rank when the launcher starts it as one.
func TestMain(m *testing.M) {
	if os.Getenv(envTestMain) == "1" {
		// The test binary as the collbench command (launcher and ranks), signals and all.
		main()
		os.Exit(0)
	}
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "--serve-collnet") {
		// The test binary as the aggregation endpoint a CollNet job's launcher starts; SIGTERM
		// (the launcher's stop) ends it.
		if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "collbench:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv("COLLPLAN_RANK") != "" || os.Getenv(envHostsRank) != "" {
		if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "collbench:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(runTests(m))
}

// syncBuffer is a bytes.Buffer safe for the launcher's writes and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func runCollbench(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := run(ctx, args, &out, &errb)
	return out.String(), errb.String(), err
}

func parse(t *testing.T, out string) *calibrate.Sweep {
	t.Helper()
	s, err := calibrate.ParseSweep("collbench.txt", strings.NewReader(out))
	require.NoError(t, err, out)
	return s
}

var small = []string{"-b", "8", "-e", "64K", "-f", "32", "-n", "2", "-w", "1", "-c", "1"}

// TestShmAllCollectives: four rank processes over shared memory run every collective, every check
// passes, and the output reads back as an nccl-tests sweep of the right collective and ranks.
func TestShmAllCollectives(t *testing.T) {
	for _, tc := range []struct {
		name string
		coll capabilities.Coll
		dt   string
	}{
		{"allreduce", capabilities.AllReduce, "float"},
		{"allgather", capabilities.AllGather, "int32"},
		{"reducescatter", capabilities.ReduceScatter, "half"},
		{"broadcast", capabilities.Broadcast, "bfloat16"},
		{"reduce", capabilities.Reduce, "int8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := runCollbench(t, append([]string{tc.name, "-np", "4", "-d", tc.dt, "-r", "1"}, small...)...)
			require.NoError(t, err, "%s\n%s", out, stderr)
			s := parse(t, out)
			assert.Equal(t, "collbench", s.Tool)
			assert.True(t, s.CollKnown)
			assert.Equal(t, tc.coll, s.Coll)
			assert.Equal(t, 4, s.Ranks)
			assert.Equal(t, tc.dt, s.Dtype)
			require.Len(t, s.Rows, 3, out) // 8 B, 256 B, 8 KiB
			for _, r := range s.Rows {
				assert.Zero(t, r.OOP.Wrong, "row %d", r.Line)
				assert.Zero(t, r.IP.Wrong, "row %d", r.Line)
			}
			assert.False(t, s.Failed)
			assert.Empty(t, s.Bad)
			assert.True(t, s.HasFooter)
			// The launcher binds 4 ranks when the host has fewer CPUs (engine's TestLauncherBinding
			// checks the masks), and the sweep says how.
			want := "# collbench binding: not bound by collbench's launcher\n"
			if runtime.NumCPU() < 4 && runtime.GOOS == "linux" {
				want = fmt.Sprintf("# collbench binding: rank r on the (r mod %d)-th of cpus ", runtime.NumCPU())
			}
			assert.Contains(t, out, want)
		})
	}
}

// TestCorruptHook: the test hook that corrupts one element makes #wrong non-zero, the footer
// FAILED and the run an error.
func TestCorruptHook(t *testing.T) {
	t.Setenv("COLLPLAN_CORRUPT", "1")
	for _, transport := range []string{"shm", "inproc"} {
		out, stderr, err := runCollbench(t, append([]string{"allreduce", "-np", "2", "--transport", transport}, small...)...)
		require.Error(t, err)
		assert.Contains(t, err.Error()+stderr, "wrong values")
		s := parse(t, out)
		assert.True(t, s.Failed)
		require.NotEmpty(t, s.Rows)
		for _, r := range s.Rows {
			assert.EqualValues(t, 1, r.OOP.Wrong, "each checked call has one wrong element")
			assert.EqualValues(t, 1, r.IP.Wrong)
		}
	}
}

// TestSweepDescribesItself: pins from the flags and from NCCL_ALGO/NCCL_PROTO, ranks, virtual
// nodes and rows come back through calibrate.ParseSweep.
func TestSweepDescribesItself(t *testing.T) {
	out, _, err := runCollbench(t, "allreduce", "--transport", "inproc", "-np", "4", "--ranks-per-node", "2",
		"--algo", "Tree", "--proto", "LL128", "-b", "1K", "-e", "1M", "-f", "4", "-n", "2", "-w", "0", "-I", "1")
	require.NoError(t, err, out)
	s := parse(t, out)
	assert.Equal(t, calibrate.Pin{Algo: "Tree", Proto: "LL128", Source: "file", AlgoSource: "file", ProtoSource: "file"}, s.Pin)
	assert.Equal(t, "all_reduce_perf", s.Program)
	assert.Equal(t, capabilities.AllReduce, s.Coll)
	assert.Equal(t, 4, s.Ranks)
	assert.Equal(t, 2, s.Nodes)
	assert.Equal(t, 2, s.GPUsPerNode)
	assert.Equal(t, "2.30.7", s.NCCLVersion)
	assert.Equal(t, int64(1024), s.MinBytes)
	assert.Equal(t, int64(4), s.StepFactor)
	assert.True(t, s.PerIter)
	require.Len(t, s.Rows, 6) // 1K, 4K, 16K, 64K, 256K, 1M
	for _, r := range s.Rows {
		assert.True(t, r.OOP.Valid && r.IP.Valid, "row %d: %+v", r.Line, r)
		assert.Greater(t, r.OOP.TimeUS, 0.0)
		assert.InDelta(t, r.OOP.AlgBW*1.5, r.OOP.BusBW, 0.02+0.01*r.OOP.BusBW)
	}
	assert.Empty(t, s.Bad)
	assert.Empty(t, s.Warnings)

	t.Setenv("NCCL_ALGO", "Ring")
	t.Setenv("NCCL_PROTO", "LL")
	out, _, err = runCollbench(t, "allgather", "--transport", "inproc", "-np", "3", "-b", "96", "-e", "96", "-n", "1")
	require.NoError(t, err, out)
	s = parse(t, out)
	assert.Equal(t, "Ring", s.Pin.Algo)
	assert.Equal(t, "LL", s.Pin.Proto)
	assert.Equal(t, capabilities.AllGather, s.Coll)
	assert.Equal(t, 3, s.Ranks)
	require.Len(t, s.Rows, 1)
	assert.Equal(t, int64(96), s.Rows[0].Bytes)
	assert.Equal(t, int64(8), s.Rows[0].Count)
}

func TestFloatStr(t *testing.T) {
	for _, tc := range []struct {
		v     float64
		width int
		want  string
	}{{25.314, 7, "25.31"}, {23456.7, 7, "23456.7"}, {1234567, 7, "1234567"}, {12345678, 7, "1.2e+07"},
		{366.2, 6, "366.20"}, {1234.5, 6, "1234.5"}, {1234567, 6, "1e+06"}, {0, 6, "0.00"}} {
		assert.Equal(t, tc.want, floatStr(tc.v, tc.width), "%v", tc.v)
	}
}

func TestParseArgsErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"alltoall"}, {"allreduce", "-d", "Float"}, {"allreduce", "-o", "mulsumx"}, {"allreduce", "-o", "All"},
		{"allreduce", "-o", "all", "--ab", "none,none"},
		{"allreduce", "-b", "2M", "-e", "1M"}, {"allreduce", "--transport", "tcp"}, {"allreduce", "-a", "4"}, {"allreduce", "--bind-to", "core"}} {
		_, err := parseArgs(args, &bytes.Buffer{})
		assert.Error(t, err, "%q", args)
	}
	o, err := parseArgs([]string{"reduce", "-b", "1k", "-e", "2G", "-f", "2", "--minbytes", "4K"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, int64(4096), o.minBytes)
	assert.Equal(t, int64(2<<30), o.maxBytes)
}

var pidRE = regexp.MustCompile(`(?m)^#  Rank  2 Group  0 Pid +(\d+) `)

// TestKillRank: SIGKILL of one rank makes the others fail within 10 s (the launcher aborts the
// communicator for it), the error names the rank, and no segment is left in /dev/shm. A stale
// segment of a "crashed" job (dead owner pid) is removed when the job starts.
func TestKillRank(t *testing.T) {
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	stale := transport.NewJobID(dead.Process.Pid)
	staleFile := filepath.Join(shm.ShmDir(), shm.ShmPrefix(stale)+"ctrl")
	require.NoError(t, os.WriteFile(staleFile, make([]byte, 4096), 0o600))

	var out, errb syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"allreduce", "-np", "4", "-b", "4K", "-e", "64K", "-f", "2", "-n", "5", "-w", "0", "-N", "0"}, &out, &errb)
	}()
	var pid int
	deadline := time.Now().Add(30 * time.Second)
	for pid == 0 && time.Now().Before(deadline) {
		if m := pidRE.FindStringSubmatch(out.String()); m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NotZero(t, pid, "no rank 2 line:\n%s\n%s", out.String(), errb.String())
	_, err := os.Stat(staleFile)
	assert.ErrorIs(t, err, os.ErrNotExist, "the stale segment is removed at start")
	time.Sleep(200 * time.Millisecond) // let the ranks get into the sweep
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	killed := time.Now()
	select {
	case err := <-done:
		assert.Less(t, time.Since(killed), 10*time.Second)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "rank 2: signal: killed")
		assert.Contains(t, errb.String(), "communicator aborted: rank 2: ", "the other ranks fail on the abort word (the launcher's, or their own rendezvous connections')")
	case <-time.After(15 * time.Second):
		t.Fatalf("the job still runs 15 s after rank 2 was killed:\n%s", errb.String())
	}
	files, _ := filepath.Glob(filepath.Join(shm.ShmDir(), fmt.Sprintf("collplan-%d.*", os.Getpid())))
	assert.Empty(t, files, "segments left behind")
}

// TestShmCollNet: a CollNetDirect and a CollNetChain job of four rank processes in two virtual
// nodes, with the aggregation endpoint the launcher starts, pass every check.
func TestShmCollNet(t *testing.T) {
	for _, algo := range []string{"CollNetDirect", "CollNetChain"} {
		t.Run(algo, func(t *testing.T) {
			out, stderr, err := runCollbench(t, append([]string{"allreduce", "-np", "4", "--ranks-per-node", "2", "--algo", algo, "-d", "int32"}, small...)...)
			require.NoError(t, err, "%s\n%s", out, stderr)
			s := parse(t, out)
			require.Len(t, s.Rows, 3, out)
			for _, r := range s.Rows {
				assert.Zero(t, r.OOP.Wrong, "row %d", r.Line)
				assert.Zero(t, r.IP.Wrong, "row %d", r.Line)
			}
			assert.Contains(t, out, "# NCCL_ALGO="+algo)
			assert.Contains(t, stderr, "CollNet aggregation endpoint pid ")
		})
	}
}

// TestPlannedCollNet: a job whose planner table picks CollNet (AllReduce at 4 nodes of one rank: the
// cpu table prices CollNetDirect lowest from about 14 KiB; checked here on the table itself, with
// --planner's compile) gets the aggregation endpoint without a pin, on both transports, and every
// size passes its check. Before, only an --algo pin started one, and every rank failed at 64 KiB
// with "COLLNET_DIRECT needs a CollNet aggregation endpoint and none is configured".
func TestPlannedCollNet(t *testing.T) {
	// The table alone (--no-overlay): the shipped overlay's 4 x 1 cells, fitted on this host, pick Ring.
	dt, err := compileTable(context.Background(), "cpu", capabilities.Env{}, costmodel.AllReduce, 4, 1, true, tunerSpec{}, io.Discard)
	require.NoError(t, err)
	require.True(t, plansCollNet([]*planner.DecisionTable{dt}), "the table picks CollNet at some size: %v", dt.Entries())
	assert.Equal(t, costmodel.CollNetDirect, dt.Lookup(64<<10).Algo, "the 64 KiB plan")
	for _, tr := range []string{"shm", "inproc"} {
		t.Run(tr, func(t *testing.T) {
			out, stderr, err := runCollbench(t, "allreduce", "-np", "4", "--ranks-per-node", "1", "--transport", tr, "--no-overlay", "-b", "1K", "-e", "64K", "-f", "8", "-n", "2", "-w", "1")
			require.NoError(t, err, "%s\n%s", out, stderr)
			s := parse(t, out)
			require.Len(t, s.Rows, 3, out)
			for _, r := range s.Rows {
				assert.Zero(t, r.OOP.Wrong, "row %d", r.Line)
				assert.Zero(t, r.IP.Wrong, "row %d", r.Line)
			}
		})
	}
}

var endpointRE = regexp.MustCompile(`CollNet aggregation endpoint pid (\d+) listening`)

// TestKillCollNetEndpoint: kill -9 of the aggregation endpoint in the middle of a CollNet job, for
// every CollNet row the engine runs (CollNetDirect AllReduce, AllGather and ReduceScatter,
// CollNetChain AllReduce): every rank process exits with an error within 10 s, naming the
// endpoint, and no segment of the job is left.
func TestKillCollNetEndpoint(t *testing.T) {
	for _, tc := range []struct{ coll, algo string }{
		{"allreduce", "CollNetDirect"}, {"allreduce", "CollNetChain"},
		{"allgather", "CollNetDirect"}, {"reducescatter", "CollNetDirect"},
	} {
		t.Run(tc.coll+"/"+tc.algo, func(t *testing.T) { killCollNetEndpoint(t, tc.coll, tc.algo) })
	}
}

func killCollNetEndpoint(t *testing.T, coll, algo string) {
	var out, errb syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{coll, "-np", "4", "--ranks-per-node", "2", "--algo", algo,
			"-b", "4K", "-e", "1M", "-f", "2", "-n", "5", "-w", "0", "-N", "0"}, &out, &errb)
	}()
	var pid int
	deadline := time.Now().Add(30 * time.Second)
	for pid == 0 && time.Now().Before(deadline) {
		if m := endpointRE.FindStringSubmatch(errb.String()); m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NotZero(t, pid, "no endpoint line:\n%s\n%s", out.String(), errb.String())
	for !strings.Contains(out.String(), "float") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // the ranks are in the sweep
	}
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	killed := time.Now()
	select {
	case err := <-done:
		assert.Less(t, time.Since(killed), 10*time.Second)
		require.Error(t, err, "the job ended cleanly after its endpoint was killed:\n%s", out.String())
		assert.Contains(t, err.Error(), "CollNet aggregation endpoint exited")
		t.Logf("%v\n%s", err, errb.String())
		for r := 0; r < 4; r++ {
			assert.Regexp(t, fmt.Sprintf("collbench: rank %d: .*(CollNet|communicator aborted)", r), errb.String(), "rank %d fails", r)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the job still runs 15 s after the endpoint was killed:\n%s", errb.String())
	}
	files, _ := filepath.Glob(filepath.Join(shm.ShmDir(), fmt.Sprintf("collplan-%d.*", os.Getpid())))
	assert.Empty(t, files, "segments left behind")
}

// TestConfigMismatchRefused: ranks started by hand (no launcher) with different parameters refuse
// to start, each with an error that says why.
func TestConfigMismatchRefused(t *testing.T) {
	addr, err := launch.FreeLoopbackAddr()
	require.NoError(t, err)
	outs := make([]bytes.Buffer, 2)
	cmds := make([]*exec.Cmd, 2)
	for r := range cmds {
		iters := strconv.Itoa(2 + r) // rank 1 times 3 iterations, rank 0 two
		cmd := exec.Command(os.Args[0], "allreduce", "-b", "8", "-e", "8", "-n", iters)
		cmd.Env = append(os.Environ(), "COLLPLAN_RANK="+strconv.Itoa(r), "COLLPLAN_WORLD_SIZE=2", "COLLPLAN_ADDR="+addr)
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		require.NoError(t, cmd.Start())
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		err := cmd.Wait()
		require.Error(t, err, "rank %d: %s", r, outs[r].String())
		assert.Contains(t, outs[r].String(), "rank 1 has configuration hash", "rank %d", r)
		assert.Contains(t, outs[r].String(), "every rank must run with the same configuration")
	}
}

// TestPinnedTimeAveraging is the regression test of -a under a pin whose algorithm cannot run
// collbench's own bookkeeping: the times of the ranks are reduced with a float64 AllReduce (-a 1
// averages, 2 takes the fastest, 3 the slowest), which NVLS cannot reduce with min or max, and
// the table compiled for the pinned sweep (float32 sum, NVLS only) planned it as NVLS: every rank
// failed with "exchanging times: ... NVLS AllReduce with float64 max". The unpinned planner's
// table hit the same at 1 x 2, where the shipped overlay picks NVLS for small calls.
func TestPinnedTimeAveraging(t *testing.T) {
	for _, a := range []string{"1", "2", "3"} {
		t.Run("a="+a, func(t *testing.T) {
			out, stderr, err := runCollbench(t, append([]string{"allreduce", "-np", "2", "--transport", "inproc", "--algo", "NVLS", "-a", a}, small...)...)
			require.NoError(t, err, "%s\n%s", out, stderr)
			s := parse(t, out)
			require.Len(t, s.Rows, 3, out)
			for _, r := range s.Rows {
				assert.Zero(t, r.OOP.Wrong, "row %d", r.Line)
				assert.Positive(t, r.OOP.TimeUS, "row %d", r.Line)
			}
			assert.Contains(t, out, "# NCCL_ALGO=NVLS")
		})
	}
}
