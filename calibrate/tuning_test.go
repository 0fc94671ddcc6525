package calibrate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/collplan/collplan/capabilities"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	ar = capabilities.AllReduce
	ag = capabilities.AllGather
)

func parseTuningFile(t *testing.T, name string) (string, []Decision, *ModelTable, error) {
	t.Helper()
	path := filepath.Join("testdata", "tuning", name)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	ds, tb, err := ParseTuning(path, f)
	return path, ds, tb, err
}

// problemsOf returns err's problems; err must be a Problems value.
func problemsOf(t *testing.T, err error) Problems {
	t.Helper()
	var ps Problems
	require.True(t, errors.As(err, &ps), "want Problems, got %v", err)
	return ps
}

// dec builds an expected decision with the defaults of a line without prefix.
func dec(line int, coll capabilities.Coll, known bool, name string, bytes int64, a capabilities.Algo,
	p capabilities.Proto, lo, hi int, time float64, format string) Decision {
	return Decision{Line: line, Coll: coll, CollKnown: known, CollName: name, Bytes: bytes, Algo: a, Proto: p,
		ChannelLo: lo, ChannelHi: hi, TimeUS: time, Format: format, PID: -1, Dev: -1, Rank: -1}
}

// The expectations below were read off the fixture files by hand.
func TestParseTuning224(t *testing.T) {
	path, ds, tb, err := parseTuningFile(t, "tuning_2.30_h100_tagged.log")
	ps := problemsOf(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, path+":44: TUNING line in none of the 2.20-2.22, 2.23 and 2.24+ formats: "+
		"AllReduce: 16384 Bytes -> Algo RING proto channel{Lo..Hi}={0..0}", ps[0].Error())

	src := func(d Decision, stamp string) Decision {
		d.Host, d.PID, d.Dev, d.Rank, d.Timestamp = "h100-node-07", 51230, 0, 0, "2025-06-11 "+stamp
		return d
	}
	R, N := capabilities.Ring, capabilities.NVLS
	want := []Decision{
		src(dec(38, ar, true, "AllReduce", 8, R, capabilities.LL, 0, 0, -1, Format224), "10:02:04"),
		src(dec(39, ar, true, "AllReduce", 8, R, capabilities.LL, 0, 0, -1, Format224), "10:02:05"),
		src(dec(40, ar, true, "AllReduce", 4096, R, capabilities.LL, 0, 0, -1, Format224), "10:02:06"),
		src(dec(41, ar, true, "AllReduce", 65536, R, capabilities.LL, 0, 1, -1, Format224), "10:02:07"),
		src(dec(42, ar, true, "AllReduce", 1048576, R, capabilities.LL, 0, 23, -1, Format224), "10:02:08"),
		src(dec(45, ar, true, "AllReduce", 2097152, N, capabilities.Simple, 0, 15, -1, Format224), "10:02:09"),
		src(dec(46, ar, true, "AllReduce", 67108864, N, capabilities.Simple, 0, 15, -1, Format224), "10:02:10"),
		src(dec(47, ag, true, "AllGather", 8192, R, capabilities.LL, 0, 1, -1, Format224), "10:02:11"),
		src(dec(48, ag, true, "AllGather", 8388608, R, capabilities.Simple, 0, 31, -1, Format224), "10:02:12"),
	}
	assert.Equal(t, want, ds)

	require.NotNil(t, tb)
	assert.Equal(t, 12, tb.Line)
	assert.Equal(t, []capabilities.Algo{capabilities.Tree, R, capabilities.CollNetDirect, capabilities.CollNetChain,
		N, capabilities.NVLSTree, capabilities.PAT}, tb.Algos)
	assert.False(t, tb.Incomplete)
	tr := capabilities.Tree
	assert.Equal(t, [3]float64{15.2, 31.5, 64.4}, tb.LatUS[ar][tr])
	assert.Equal(t, [3]float64{38.7, 114.5, 147.2}, tb.BwGBps[ar][tr])
	assert.Equal(t, [3]float64{15.0, 40.6, 56.0}, tb.LatUS[ar][R])
	assert.Equal(t, [3]float64{80.6, 168.2, 182.9}, tb.BwGBps[ar][R])
	assert.Equal(t, [3]float64{0, 0, 25.0}, tb.LatUS[ar][N])
	assert.Equal(t, [3]float64{0, 0, 182.9}, tb.BwGBps[ar][N])
	assert.Equal(t, [3]float64{5.6, 5.6, 10.7}, tb.LatUS[ar][capabilities.CollNetDirect])
	assert.Equal(t, [3]float64{10.8, 27.3, 32.2}, tb.LatUS[ag][R])
	assert.Equal(t, [3]float64{161.1, 336.5, 365.7}, tb.BwGBps[ag][R])
	assert.Equal(t, [3]float64{0, 0, 208.2}, tb.BwGBps[capabilities.ReduceScatter][N])
	assert.Equal(t, [3]float64{7.2, 15.9, 11.8}, tb.LatUS[capabilities.Broadcast][R])
	assert.Equal(t, [3]float64{141.0, 294.4, 320.0}, tb.BwGBps[capabilities.Reduce][R])
	assert.Equal(t, [capabilities.NumAlgos][capabilities.NumProtos]int{
		{512, 640, 512}, {512, 640, 512}, {0, 0, 512}, {0, 0, 512}, {0, 0, 640}, {0, 0, 640}, {0, 0, 0}}, tb.MaxThreads)
	assert.True(t, tb.Has(capabilities.PAT))
}

func TestParseTuning223(t *testing.T) {
	path, ds, tb, err := parseTuningFile(t, "tuning_2.23_h200_srun.log")
	ps := problemsOf(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, path+":7: algorithm id 9 out of range 0..6: AllReduce: 4194304 Bytes -> Algo 9 proto 2 time 140.000000", ps[0].Error())
	assert.Nil(t, tb)
	src := func(d Decision) Decision {
		d.Host, d.PID, d.Dev, d.Rank = "h200-p4d-001", 88000, 0, 0
		return d
	}
	T, R, NT := capabilities.Tree, capabilities.Ring, capabilities.NVLSTree
	LL, LL128, S := capabilities.LL, capabilities.LL128, capabilities.Simple
	want := []Decision{
		src(dec(3, ar, true, "AllReduce", 8, T, LL, -1, -1, 35.200001, Format223)),
		src(dec(4, ar, true, "AllReduce", 65536, T, LL, -1, -1, 45.91, Format223)),
		src(dec(5, ar, true, "AllReduce", 1048576, T, LL128, -1, -1, 106.019997, Format223)),
		src(dec(8, ar, true, "AllReduce", 2097152, NT, S, -1, -1, 128.919998, Format223)),
		src(dec(9, ar, true, "AllReduce", 1073741824, NT, S, -1, -1, 10510.46875, Format223)),
		src(dec(10, ag, true, "AllGather", 2048, R, LL, -1, -1, 45.810001, Format223)),
		src(dec(11, ag, true, "AllGather", 32768, R, LL128, -1, -1, 90.239998, Format223)),
		src(dec(12, 0, false, "SendRecv", 4096, R, S, -1, -1, 12.5, Format223)),
	}
	assert.Equal(t, want, ds)
}

func TestParseTuning220(t *testing.T) {
	path, ds, tb, err := parseTuningFile(t, "tuning_2.21_pcie_plain.log")
	ps := problemsOf(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, path+`:22: time "nan(ind)x" is not a number: 1048576 Bytes -> Algo 1 proto 2 time nan(ind)x`, ps[0].Error())
	src := func(d Decision) Decision {
		d.Host, d.PID, d.Dev = "pcie-a100-3", 7711, 0
		return d
	}
	R, LL, S := capabilities.Ring, capabilities.LL, capabilities.Simple
	want := []Decision{
		src(dec(18, 0, false, "", 8, R, LL, -1, -1, 12.6, Format220)),
		src(dec(19, 0, false, "", 4096, R, LL, -1, -1, 13.11, Format220)),
		src(dec(20, 0, false, "", 65536, R, LL, -1, -1, 20.790001, Format220)),
		src(dec(21, 0, false, "", 1048576, R, S, -1, -1, 108.139999, Format220)),
	}
	assert.Equal(t, want, ds)
	require.NotNil(t, tb)
	assert.Equal(t, 2, tb.Line)
	assert.Len(t, tb.Algos, 6, "2.20-2.22 have no PAT")
	assert.False(t, tb.Has(capabilities.PAT))
	assert.Equal(t, [3]float64{12.8, 16.9, 32.4}, tb.LatUS[ar][capabilities.Tree])
	assert.Equal(t, [3]float64{2.9, 0, 11.0}, tb.BwGBps[ar][capabilities.Tree])
	assert.Equal(t, [3]float64{12.6, 22.4, 42.6}, tb.LatUS[ar][R])
	assert.Equal(t, [3]float64{8.0, 0, 16.0}, tb.BwGBps[ar][R])
	assert.Equal(t, [3]float64{7.6, 14.3, 17.2}, tb.LatUS[ag][R])
	assert.Equal(t, [3]int{0, 0, 640}, tb.MaxThreads[capabilities.NVLSTree])
}

func TestParseTuningOldTable(t *testing.T) {
	path, ds, tb, err := parseTuningFile(t, "tuning_2.7_oldtable.log")
	assert.Empty(t, ds, "2.19 and older log no decisions")
	ps := problemsOf(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, path+`:2: model table: unknown columns "CollNet/    LL", "CollNet/ LL128", "CollNet/Simple" (skipped)`, ps[0].Error())
	require.NotNil(t, tb)
	assert.Equal(t, 2, tb.Line)
	assert.Equal(t, []capabilities.Algo{capabilities.Tree, capabilities.Ring}, tb.Algos)
	assert.Equal(t, [3]float64{4.4, 7.4, 24.2}, tb.LatUS[ar][capabilities.Tree])
	assert.Equal(t, [3]float64{9.0, 41.6, 46.8}, tb.BwGBps[ar][capabilities.Tree])
	assert.Equal(t, [3]float64{21.0, 96.0, 120.0}, tb.BwGBps[capabilities.Broadcast][capabilities.Ring])
	assert.Equal(t, [3]int{512, 640, 256}, tb.MaxThreads[capabilities.Tree])
}

func TestParseTuningInline(t *testing.T) {
	const p = "host:1:2 [0] NCCL INFO "
	tests := []struct {
		name    string
		in      string
		nDec    int
		problem string // "" when no problem; else the first problem's text
	}{
		{"channel range reversed", p + "AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={3..1}\n", 0,
			"x.log:1: channel range {3..1} is not a range: AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={3..1}"},
		{"unknown algorithm name", p + "AllReduce: 8 Bytes -> Algo FOO proto LL channel{Lo..Hi}={0..0}\n", 0,
			`x.log:1: unknown algorithm "FOO": AllReduce: 8 Bytes -> Algo FOO proto LL channel{Lo..Hi}={0..0}`},
		{"unknown protocol name", p + "AllReduce: 8 Bytes -> Algo RING proto LL64 channel{Lo..Hi}={0..0}\n", 0,
			`x.log:1: unknown protocol "LL64": AllReduce: 8 Bytes -> Algo RING proto LL64 channel{Lo..Hi}={0..0}`},
		{"protocol id out of range", p + "AllReduce: 8 Bytes -> Algo 1 proto 3 time 1.0\n", 0,
			"x.log:1: protocol id 3 out of range 0..2: AllReduce: 8 Bytes -> Algo 1 proto 3 time 1.0"},
		{"byte count overflow", p + "99999999999999999999 Bytes -> Algo 1 proto 0 time 1.0\n", 0,
			`x.log:1: byte count "99999999999999999999" out of range: 99999999999999999999 Bytes -> Algo 1 proto 0 time 1.0`},
		{"infinite time", p + "AllReduce: 8 Bytes -> Algo 1 proto 0 time inf\n", 0,
			`x.log:1: time "inf" is not a number: AllReduce: 8 Bytes -> Algo 1 proto 0 time inf`},
		{"copy engine path skipped", p + "AllGather [Copy Engine]: 8 Bytes -> Algo CE proto SIMPLE\n", 0, ""},
		{"WARN and foreign lines ignored", "host:1:2 [0] NCCL WARN AllReduce: 8 Bytes -> Algo X\n8 Bytes -> Algo 1 proto 0 time 1.0\n", 0, ""},
		{"later fields tolerated", p + "AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0} nWarps 4\n", 1, ""},
		{"srun label and timestamp", "3: [2025-01-01 00:00:00.123] " + p + "AllReduce: 8 Bytes -> Algo TREE proto SIMPLE channel{Lo..Hi}={0..7}\n", 1, ""},
		{"Protocol row without Algorithm row", p + "  Protocol    |             LL |\n", 0,
			"x.log:1: model table: Protocol row without an Algorithm row"},
		{"Max NThreads without header", p + " Max NThreads |            512 |\n", 0,
			"x.log:1: model table: Max NThreads row without its header rows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds, _, err := ParseTuning("x.log", strings.NewReader(tt.in))
			assert.Len(t, ds, tt.nDec)
			if tt.problem == "" {
				assert.NoError(t, err)
				return
			}
			ps := problemsOf(t, err)
			assert.Equal(t, tt.problem, ps[0].Error())
		})
	}
	t.Run("srun label gives the rank and the timestamp is kept", func(t *testing.T) {
		ds, _, err := ParseTuning("x.log", strings.NewReader("3: [2025-01-01 00:00:00.123] "+p+
			"AllReduce: 8 Bytes -> Algo TREE proto SIMPLE channel{Lo..Hi}={0..7}\n"))
		require.NoError(t, err)
		require.Len(t, ds, 1)
		assert.Equal(t, 3, ds[0].Rank)
		assert.Equal(t, "2025-01-01 00:00:00.123", ds[0].Timestamp)
		assert.Equal(t, "host", ds[0].Host)
	})
}

func TestParseTuningTableErrors(t *testing.T) {
	const p = "host:1:2 [0] NCCL INFO "
	head := p + "  Algorithm   |                            Tree                  |\n" +
		p + "  Protocol    |             LL |          LL128 |         Simple |             LL |          LL128 |         Simple |\n"
	thr := p + " Max NThreads |            512 |            640 |            512 |\n"
	row := func(c string) string {
		return p + c + " |    15.2/  38.7 |    31.5/ 114.5 |    64.4/ 147.2 |\n"
	}
	full := head + thr + row("    Broadcast") + row("       Reduce") + row("    AllGather") + row("ReduceScatter") + row("    AllReduce")
	t.Run("complete", func(t *testing.T) {
		_, tb, err := ParseTuning("x.log", strings.NewReader(full))
		require.NoError(t, err)
		assert.Equal(t, [3]float64{15.2, 31.5, 64.4}, tb.LatUS[capabilities.ReduceScatter][capabilities.Tree])
	})
	t.Run("a second table is ignored", func(t *testing.T) {
		other := strings.SplitAfter(strings.ReplaceAll(full, "15.2/", "99.9/"), "\n")
		_, tb, err := ParseTuning("x.log", strings.NewReader(full+strings.Join(other[:5], "")))
		require.NoError(t, err)
		assert.Equal(t, 15.2, tb.LatUS[ar][capabilities.Tree][0])
	})
	tests := []struct {
		name, in, problem string
	}{
		{"incomplete", head + thr + row("    Broadcast"),
			"x.log:1: the model table is incomplete (a block has fewer than five collective rows)"},
		{"thread count", head + p + " Max NThreads |            512 |            640 |\n",
			"x.log:3: model table: 2 thread counts for 3 columns"},
		{"thread value", head + p + " Max NThreads |            512 |            640 |           many |\n",
			`x.log:3: model table: thread count "many" is not a count`},
		{"cell count", head + thr + p + "    Broadcast |    15.2/  38.7 |\n",
			"x.log:4: model table: Broadcast row has 1 cells for 3 columns"},
		{"cell value", head + thr + p + "    Broadcast |    15.2/  38.7 |    31.5/ 114.5 |    64.4/  inf |\n",
			`x.log:4: model table: Broadcast cell "64.4/  inf" is not lat/bw`},
		{"unknown names", p + "  Algorithm   |          CollNet                  |\n" +
			p + "  Protocol    |             LL |          LL256 |         Simple |\n",
			`x.log:2: model table: unknown names "CollNet", "LL256" (columns skipped)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseTuning("x.log", strings.NewReader(tt.in))
			ps := problemsOf(t, err)
			assert.Equal(t, tt.problem, ps[0].Error(), "all: %v", ps)
		})
	}
}
