//go:build linux && !race

package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/engine/launch"
	"github.com/collplan/collplan/engine/transport/collnet"
	"github.com/collplan/collplan/engine/transport/shm"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// Bounded staging: a rank's memory beyond the user's buffers does not grow with the message size,
// because every connection is a FIFO of NCCL_STEPS fixed slots. The test runs AllReduce (float
// sum, out of place, planned by the cpu node table's DecisionTable as collbench plans it) with the
// ranks as processes over shared memory, and compares each rank's peak RSS (VmHWM) less its send
// and receive buffers between a small and a large message.
//
// The NVLS cases pin NVLS/Simple on one channel (the multicast object, nvls.go, is that channel's
// NCCL_STEPS steps of nvlsChunkSize per head, up and down, for every member: 6 MiB touched per rank
// on 2 ranks, 14 MiB on 4) and run 1 MiB against 1 GiB on 2 and 4 ranks.
//
// The CollNetDirect cases pin CollNetDirect/Simple on one channel in virtual nodes of n/2 ranks
// (2 nodes) with the aggregation endpoint the launcher starts (this test binary running
// TestCollNetEndpointHelper): the node's region (collnet.go: NVLS's shape, 2 MiB per rank on 2 ranks,
// 8 MiB on 4) and the endpoint connection's NCCL_STEPS result slots of a Simple step (4 MiB) are
// the staging; 1 MiB against 1 GiB on 2 and 4 ranks. CollNetDirect AllGather and ReduceScatter
// (NCCL's other two CollNet collectives, "collnetdirect-ag" and "-rs") run the same region and
// endpoint connection with 1 MiB against 256 MiB of the large side (AllGather's output,
// ReduceScatter's input; 1 GiB measured the same, 2026-12-03) on 4 ranks; the buffers subtracted
// are then that side and its nth.
//
// It allocates 2 x 1 GiB per rank on up to 4 ranks, so it runs only when COLLPLAN_STAGING_TEST=1
// (and never under -short or the race detector):
//
//	COLLPLAN_STAGING_TEST=1 go test -run TestStagingBounded -v ./engine/

const (
	stagingBytesEnv = "COLLPLAN_STAGING_BYTES" // set in the rank processes: the message size
	stagingAlgoEnv  = "COLLPLAN_STAGING_ALGO"  // set in the rank processes: "nvls" pins NVLS/Simple on 1 channel, "collnetdirect" CollNetDirect (AllReduce; -ag AllGather, -rs ReduceScatter)
	stagingSlack    = 16 << 20
)

func TestStagingBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	if os.Getenv("COLLPLAN_STAGING_TEST") != "1" {
		t.Skip("set COLLPLAN_STAGING_TEST=1 to run (allocates up to 8 GiB, about a minute)")
	}
	for _, tc := range []struct {
		n          int
		small, big int64
		algo       string
	}{
		{2, 1 << 20, 1 << 30, ""},
		{4, 1 << 20, 256 << 20, ""},
		{2, 1 << 20, 1 << 30, "nvls"},
		{4, 1 << 20, 1 << 30, "nvls"},
		{2, 1 << 20, 1 << 30, "collnetdirect"},
		{4, 1 << 20, 1 << 30, "collnetdirect"},
		{4, 1 << 20, 256 << 20, "collnetdirect-ag"},
		{4, 1 << 20, 256 << 20, "collnetdirect-rs"},
	} {
		name := fmt.Sprintf("ranks=%d", tc.n)
		if tc.algo != "" {
			name += "/" + tc.algo
		}
		t.Run(name, func(t *testing.T) {
			small := stagingRun(t, tc.n, tc.small, tc.algo)
			big := stagingRun(t, tc.n, tc.big, tc.algo)
			for r := 0; r < tc.n; r++ {
				es, eb := small[r].hwm-small[r].buffers, big[r].hwm-big[r].buffers
				t.Logf("rank %d: VmHWM %.1f MiB at %d MiB (%.1f MiB beyond the buffers), %.1f MiB at %d MiB (%.1f MiB beyond)",
					r, mib(small[r].hwm), tc.small>>20, mib(es), mib(big[r].hwm), tc.big>>20, mib(eb))
				if d := eb - es; d > stagingSlack || d < -stagingSlack {
					t.Errorf("rank %d: memory beyond the buffers differs by %.1f MiB between %d MiB and %d MiB (limit %d MiB)",
						r, mib(d), tc.small>>20, tc.big>>20, stagingSlack>>20)
				}
			}
		})
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// rankMemory is what a rank process of stagingRun reports: its VmHWM and its send plus receive
// buffers' bytes.
type rankMemory struct{ hwm, buffers int64 }

// stagingRun launches n rank processes (this test binary, running TestStagingRank) on a message of
// size bytes (algo: see stagingAlgoEnv) and returns each rank's memory.
func stagingRun(t *testing.T, n int, size int64, algo string) []rankMemory {
	t.Helper()
	var out, errb bytes.Buffer
	l := &launch.Launcher{
		N:      n,
		Argv:   []string{os.Args[0], "-test.run=^TestStagingRank$", "-test.v"},
		Env:    append(os.Environ(), stagingBytesEnv+"="+strconv.FormatInt(size, 10), stagingAlgoEnv+"="+algo),
		Stdout: &out, Stderr: &errb,
	}
	if strings.HasPrefix(algo, "collnetdirect") {
		l.CollNet = []string{os.Args[0], "-test.run=^TestCollNetEndpointHelper$"} // the launcher appends the address
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := l.Run(ctx); err != nil {
		t.Fatalf("%d ranks, %d bytes: %v\nstdout:\n%s\nstderr:\n%s", n, size, err, out.String(), errb.String())
	}
	mem := make([]rankMemory, n)
	seen := 0
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r int
		var b, h, buf int64
		if _, err := fmt.Sscanf(strings.TrimSpace(sc.Text()), "STAGING rank=%d bytes=%d buffers=%d vmhwm=%d", &r, &b, &buf, &h); err == nil && r >= 0 && r < n {
			mem[r] = rankMemory{hwm: h, buffers: buf}
			seen++
		}
	}
	if seen != n {
		t.Fatalf("%d of %d ranks reported VmHWM:\n%s\n%s", seen, n, out.String(), errb.String())
	}
	return mem
}

// TestStagingRank is one rank process of TestStagingBounded (it skips unless launched by it).
func TestStagingRank(t *testing.T) {
	sizeS := os.Getenv(stagingBytesEnv)
	if sizeS == "" {
		t.Skip("a rank process of TestStagingBounded")
	}
	size, err := strconv.ParseInt(sizeS, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	env, ok, err := launch.EnvFrom(os.Getenv)
	if err != nil || !ok {
		t.Fatalf("not a rank (%v)", err)
	}
	cfg := engine.Config{}
	dt, err := stagingTable(env.Size)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tables = []*planner.DecisionTable{dt}
	algo := os.Getenv(stagingAlgoEnv)
	switch algo {
	case "nvls":
		cfg.Override = engine.Pin(costmodel.NVLS, costmodel.Simple)
		cfg.Override.Channels = 1
	case "collnetdirect", "collnetdirect-ag", "collnetdirect-rs":
		cfg.Override = engine.Pin(costmodel.CollNetDirect, costmodel.Simple)
		cfg.Override.Channels = 1
		cfg.RanksPerNode = env.Size / 2
		cfg.CollNet = engine.CollNetConfig{Addr: os.Getenv(collnet.CollNetEnv), Job: env.Job}
	}
	h, err := engine.ConfigHash(env.Size, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	job, err := engine.Rendezvous(ctx, env.Rank, env.Size, env.Addr, h, env.Job, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := shm.NewShmTransport(job)
	if err != nil {
		t.Fatal(err)
	}
	c, err := engine.New(env.Rank, env.Size, tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// size is the large side: AllReduce's buffers, AllGather's output, ReduceScatter's input; the
	// small side of those two is its nth (count per rank: AllGather's send, ReduceScatter's recv).
	n := env.Size
	sendBytes, recvBytes := size, size
	switch algo {
	case "collnetdirect-ag":
		sendBytes = size / int64(n)
	case "collnetdirect-rs":
		recvBytes = size / int64(n)
	}
	send, recv := make([]byte, sendBytes), make([]byte, recvBytes)
	one := math.Float32bits(1)
	for i := 0; i < len(send)/4; i++ {
		binary.LittleEndian.PutUint32(send[4*i:], one)
	}
	want := math.Float32bits(float32(n)) // a sum of n ones; AllGather gathers ones
	for i := 0; i < 3; i++ {
		switch algo {
		case "collnetdirect-ag":
			err = c.AllGather(ctx, send, recv, len(send)/4, kernels.Float32)
			want = one
		case "collnetdirect-rs":
			err = c.ReduceScatter(ctx, send, recv, len(recv)/4, kernels.Float32, kernels.Sum)
		default:
			err = c.AllReduce(ctx, send, recv, len(send)/4, kernels.Float32, kernels.Sum)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	count := len(recv) / 4
	for _, i := range []int{0, count / 2, count - 1} {
		if v := binary.LittleEndian.Uint32(recv[4*i:]); v != want {
			t.Fatalf("element %d: %#x, want %#x", i, v, want)
		}
	}
	hwm, err := vmHWM()
	if err != nil {
		t.Fatal(err)
	}
	p := c.LastPlan()
	if cfg.Override.PinAlgo && p.Algo != cfg.Override.Algo {
		t.Fatalf("ran %v/%v, not the pinned %v", p.Algo, p.Proto, cfg.Override.Algo)
	}
	fmt.Printf("STAGING rank=%d bytes=%d buffers=%d vmhwm=%d plan=%v/%v/%dch\n", env.Rank, size, sendBytes+recvBytes, hwm, p.Algo, p.Proto, p.Channels)
}

// stagingTable is collbench's plan source: the planner's AllReduce table for the cpu node table,
// one virtual node.
func stagingTable(n int) (*planner.DecisionTable, error) {
	node, err := tables.Load("cpu")
	if err != nil {
		return nil, err
	}
	node.Node.GPUsPerNode = n
	topo, err := capabilities.FromNode(node, 1)
	if err != nil {
		return nil, err
	}
	pl, err := planner.New(&topo, planner.Config{})
	if err != nil {
		return nil, err
	}
	return pl.Compile(context.Background(), planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1})
}

// vmHWM returns this process's peak resident set size (VmHWM of /proc/self/status) in bytes.
func vmHWM() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}
