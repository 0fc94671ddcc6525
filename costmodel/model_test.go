package costmodel

import (
	"bufio"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
)

// TestS13Table checks every lat/bw entry of reference §13 (testdata/s13.txt) to the printed
// precision.
func TestS13Table(t *testing.T) {
	f, err := os.Open("testdata/s13.txt")
	require.NoError(t, err)
	defer f.Close()
	tables := map[string]*Table{}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		require.Len(t, fs, 6, line)
		tb, ok := tables[fs[0]]
		if !ok {
			topo := scenario(fs[0])
			tb, err = mustBuild(&topo)
			require.NoError(t, err)
			tables[fs[0]] = tb
		}
		c, err := capabilities.ParseColl(fs[1])
		require.NoError(t, err)
		a, err := capabilities.ParseAlgo(fs[2])
		require.NoError(t, err)
		p, err := capabilities.ParseProto(fs[3])
		require.NoError(t, err)
		lat, _ := strconv.ParseFloat(fs[4], 64)
		bw, _ := strconv.ParseFloat(fs[5], 64)
		assert.InDelta(t, lat, tb.Lat[c][a][p], 0.005, line)
		assert.InDelta(t, bw, tb.BW[c][a][p], 0.005+bw*1e-6, line)
		assert.Empty(t, tb.Reason[c][a][p], line)
		n++
	}
	require.NoError(t, sc.Err())
	assert.Equal(t, 33, n)
}

// TestThreadsS1 checks §13 S1's maxThreads Ring/Tree = 512/640/512 and Ring LL threshold 64.
func TestThreadsS1(t *testing.T) {
	topo := s1()
	tb, err := mustBuild(&topo)
	require.NoError(t, err)
	for _, a := range []Algo{Ring, Tree} {
		assert.Equal(t, [NumProtos]int{512, 640, 512}, tb.MaxThreads[a], a.String())
	}
	assert.Equal(t, 64, tb.ThreadThresholds[Ring][LL])
	assert.Equal(t, [NumProtos]int{8, 8, 64}, tb.ThreadThresholds[Tree])
	assert.Equal(t, 512, tb.ThreadThresholds[CollNetDirect][Simple])
	assert.Equal(t, 0, tb.MaxThreads[PAT][Simple])
	assert.Equal(t, 640, tb.MaxThreads[NVLS][Simple])
}

// TestThreadEnv: NCCL_NTHREADS not a multiple of 32 gives the max, out of range is clamped;
// NCCL_THREAD_THRESHOLDS sets Tree then Ring, negative keeps the default; a PCIe ring
// (bwIntra*nCh <= 12) defaults Ring/Simple to 256.
func TestThreadEnv(t *testing.T) {
	topo := s1()
	topo.Env.NThreads = capabilities.Setting{Value: "100", Source: capabilities.SourceProcess}
	topo.Env.LL128NThreads = capabilities.Setting{Value: "96", Source: capabilities.SourceProcess}
	topo.Env.ThreadThresholds = capabilities.Setting{Value: "1 2 3 -1 5", Source: capabilities.SourceTopology}
	tb, err := mustBuild(&topo)
	require.NoError(t, err)
	assert.Equal(t, 512, tb.MaxThreads[Ring][Simple]) // 100 % 32 != 0 -> max
	assert.Equal(t, 160, tb.MaxThreads[Ring][LL128])  // 96 < 160 -> clamped
	assert.Equal(t, [NumProtos]int{1, 2, 3}, tb.ThreadThresholds[Tree])
	assert.Equal(t, [NumProtos]int{64, 5, 64}, tb.ThreadThresholds[Ring]) // -1 keeps 8*nRanks

	topo = s1()
	topo.Env.NThreads = capabilities.Setting{Value: "1024", Source: capabilities.SourceFlag}
	topo.Graphs.Ring = graph(1, 12, 12, capabilities.PathPXB)
	tb, err = mustBuild(&topo)
	require.NoError(t, err)
	assert.Equal(t, 512, tb.MaxThreads[Ring][Simple]) // clamped to 512

	topo.Env.NThreads = capabilities.Setting{}
	tb, err = mustBuild(&topo)
	require.NoError(t, err)
	assert.Equal(t, 256, tb.MaxThreads[Ring][Simple]) // 12*1 <= PCI_BW 12

	for _, bad := range []string{"1 x", "1 2 3 4 5 6 7"} {
		topo.Env.ThreadThresholds = capabilities.Setting{Value: bad, Source: capabilities.SourceFlag}
		_, err = mustBuild(&topo)
		assert.ErrorContains(t, err, "NCCL_THREAD_THRESHOLDS", bad)
	}
}

// TestTimeS1 works NCCL's time formula by hand on S1's Tree/LL AllReduce at 4 KiB:
// logSize = log2i(4096>>6) = 6, treeCorrectionFactor[LL][6] = 0.7, so
// time = 15.2 + 4096/(1000*38.74*0.7) = 15.351.
func TestTimeS1(t *testing.T) {
	topo := s1()
	tb, err := mustBuild(&topo)
	require.NoError(t, err)
	got := tb.Time(AllReduce, Tree, LL, 4096, 1, 0.7)
	assert.InDelta(t, 15.2+4096/(1000*38.7368*0.7), got, 0.001)
	assert.Equal(t, float32(-1), tb.Time(AllReduce, PAT, Simple, 4096, 1, 1), "unmodelled cell")
	assert.Equal(t, float32(-1), tb.Time(Broadcast, Tree, LL, 4096, 1, 1), "Tree is AllReduce-only")
}

func TestLog2i(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want int
	}{{-5, -1}, {0, -1}, {1, 0}, {2, 1}, {3, 1}, {64, 6}, {1 << 40, 40}, {1<<40 - 1, 39}} {
		assert.Equal(t, tc.want, Log2i(tc.in), tc.in)
	}
}

// TestNRanks1: with one rank NCCL builds no table; every cell has bandwidth 0 and a reason.
func TestNRanks1(t *testing.T) {
	topo := s1()
	topo.NRanks, topo.MaxLocalRanks, topo.LocalRanks = 1, 1, 1
	tb, err := mustBuild(&topo)
	require.NoError(t, err)
	for c := Coll(0); c < NumColls; c++ {
		for a := Algo(0); a < NumAlgos; a++ {
			for p := Proto(0); p < NumProtos; p++ {
				assert.Zero(t, tb.BW[c][a][p])
				assert.Contains(t, tb.Reason[c][a][p], "single rank")
			}
		}
	}
	assert.Equal(t, 512, tb.MaxThreads[Ring][LL], "maxThreads is still set")
}

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*capabilities.Topology)
		want string
	}{
		{"ranks below nodes", func(t *capabilities.Topology) { t.NRanks = 0 }, "n_ranks"},
		{"bad algo env", func(t *capabilities.Topology) {
			t.Env.Algo = capabilities.Setting{Value: "ring,rng", Source: capabilities.SourceFlag}
		}, "rng"},
		{"bad proto env", func(t *capabilities.Topology) {
			t.Env.Proto = capabilities.Setting{Value: "fast", Source: capabilities.SourceTopology}
		}, "fast"},
		{"bad overhead", func(t *capabilities.Topology) {
			t.NNodes, t.NRanks = 2, 16
			t.Env.NetOverhead = capabilities.Setting{Value: "1.5", Source: capabilities.SourceProcess}
		}, "NCCL_NET_OVERHEAD"},
		{"bad pat", func(t *capabilities.Topology) {
			t.Env.PATEnable = capabilities.Setting{Value: "yes", Source: capabilities.SourceProcess}
		}, "NCCL_PAT_ENABLE"},
		{"bad c2c", func(t *capabilities.Topology) {
			t.Env.LL128C2C = capabilities.Setting{Value: "on", Source: capabilities.SourceProcess}
		}, "NCCL_LL128_C2C"},
		{"bad nthreads", func(t *capabilities.Topology) {
			t.Env.NThreads = capabilities.Setting{Value: "many", Source: capabilities.SourceProcess}
		}, "NCCL_NTHREADS"},
		{"bad ll128 nthreads", func(t *capabilities.Topology) {
			t.Env.LL128NThreads = capabilities.Setting{Value: "x", Source: capabilities.SourceProcess}
		}, "NCCL_LL128_NTHREADS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := s1()
			tc.edit(&topo)
			_, err := mustBuild(&topo)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// TestNaNCollNetDirect is addendum 5: with CollNet on, an NVSwitch and a zero CollNetDirect graph,
// the AllReduce Simple intermediate is ppn/0 = inf, then inf - inf = NaN. NCCL does not trap; the
// cell's time is NaN, which no argmin accepts. With nvs_count 0 the forced disable zeroes it.
func TestNaNCollNetDirect(t *testing.T) {
	topo := s2()
	topo.CollNetEnable, topo.CollNetChainSupport = true, true
	topo.Graphs.CollNetChain = graph(4, 24, 12, capabilities.PathNVL)
	tb, err := mustBuild(&topo)
	require.NoError(t, err)
	bw := tb.BW[AllReduce][CollNetDirect][Simple]
	assert.True(t, math.IsNaN(float64(bw)), "bw %v", bw)
	assert.Contains(t, tb.Reason[AllReduce][CollNetDirect][Simple], "NaN")
	tm := tb.Time(AllReduce, CollNetDirect, Simple, 1<<20, 1, 1)
	assert.False(t, tm >= 0, "time %v must not pass t >= 0", tm)

	topo.NVSCount = 0
	tb, err = mustBuild(&topo)
	require.NoError(t, err)
	assert.Zero(t, tb.BW[AllReduce][CollNetDirect][Simple])
	assert.Contains(t, tb.Reason[AllReduce][CollNetDirect][Simple], "NVSwitch")
	// Its latency is kept: 2*(min(1, 7)*0 + 7*0.4) + hwLat[NET][CollNetDirect][Simple] (31); the zero
	// graph's typeIntra LOC gives the PCI class, whose CollNetDirect Simple latency is 3.7:
	// 2*(3.7 + 2.8) + 31 = 44.
	assert.InDelta(t, 44.0, tb.Lat[AllReduce][CollNetDirect][Simple], 1e-4)
}
