package plugin

import (
	"math"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"testing/quick"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	pb "github.com/collplan/collplan/plugin/proto"
	"github.com/collplan/collplan/tables"
)

// TestTopologyRoundTrip fills every field of capabilities.Topology at random and checks it
// crosses the wire unchanged, so a field added there and forgotten here fails.
func TestTopologyRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	typ := reflect.TypeOf(capabilities.Topology{})
	for i := 0; i < 200; i++ {
		v, ok := quick.Value(typ, rng)
		require.True(t, ok)
		in := v.Interface().(capabilities.Topology)
		p := topologyToProto(&in)
		out, _ := topologyFromProto(p) // random topologies do not validate; the fields must still match
		if len(in.CollNetSupport) == 0 {
			in.CollNetSupport = nil
		}
		require.Equal(t, in, out)
	}
	// h100 (real hardware) and cpu (an emulated node: its [emulation] crosses too).
	for _, name := range []string{"h100", "cpu"} {
		n, err := tables.Load(name)
		require.NoError(t, err)
		topo, err := capabilities.FromNode(n, 2)
		require.NoError(t, err)
		out, err := topologyFromProto(topologyToProto(&topo))
		require.NoError(t, err)
		assert.Equal(t, topo, out, name)
	}
	_, err := topologyFromProto(&pb.Topology{})
	assert.ErrorContains(t, err, "n_nodes")
}

func TestConstantsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	v, ok := quick.Value(reflect.TypeOf(costmodel.Constants{}), rng)
	require.True(t, ok)
	k := v.Interface().(costmodel.Constants)
	// quick's floats may be negative; constants are not.
	p := constantsToProto(&k)
	for _, s := range [][]float64{p.BaseLat, p.HwLat, p.LlMaxBws, p.PerChMaxRingLl128Bws, p.PerChMaxTreeLl128Bws, p.PerChMaxTreeBws, p.PerChMaxNvlsTreeBws} {
		for i := range s {
			s[i] = math.Abs(s[i])
		}
	}
	got, err := constantsFromProto(p)
	require.NoError(t, err)
	assert.Equal(t, constantsToProto(&got).String(), p.String())

	d := costmodel.DefaultConstants()
	got, err = constantsFromProto(constantsToProto(&d))
	require.NoError(t, err)
	assert.Equal(t, d, got)

	bad := constantsToProto(&d)
	bad.HwLat = bad.HwLat[1:]
	_, err = constantsFromProto(bad)
	assert.ErrorContains(t, err, "hw_lat has 62 values, want 63")
	bad = constantsToProto(&d)
	bad.LlMaxBws[3] = math.Inf(1)
	_, err = constantsFromProto(bad)
	assert.ErrorContains(t, err, "ll_max_bws[3]")
}

func TestFactorsRoundTrip(t *testing.T) {
	n, err := tables.Load("b200")
	require.NoError(t, err)
	topo, err := capabilities.FromNode(n, 1)
	require.NoError(t, err)
	f := correction.Default(&topo)
	require.NoError(t, f.Set(costmodel.AllGather, costmodel.Ring, costmodel.LL, []float64{0.5, 2}, correction.SourceTable))
	got, err := factorsFromProto(factorsToProto(f))
	require.NoError(t, err)
	for c := costmodel.Coll(0); c < costmodel.NumColls; c++ {
		for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
			for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
				require.Equal(t, f.Source(c, a, p), got.Source(c, a, p))
				for i := -1; i <= correction.NumBuckets; i++ {
					n := int64(1)
					if i >= 0 {
						n = correction.BucketStart(i)
					}
					require.Equal(t, f.Factor(c, a, p, n), got.Factor(c, a, p, n), "%s %s %s bucket %d", c, a, p, i)
				}
			}
		}
	}
	_, err = factorsFromProto([]*pb.CellFactors{{Coll: 9}})
	assert.ErrorContains(t, err, "out of range")
	_, err = factorsFromProto([]*pb.CellFactors{{Coll: 4, Factors: []float64{math.NaN()}}})
	assert.ErrorContains(t, err, "factor 0")
}

// TestIntervalsFromProto checks the host's refusals of a reply.
func TestIntervalsFromProto(t *testing.T) {
	edit := func(k pb.EditKind, a, p int32, v float64) *pb.Edit {
		return &pb.Edit{Kind: k, Algo: a, Proto: p, Value: v}
	}
	iv := func(lo, hi int64, es ...*pb.Edit) *pb.Interval { return &pb.Interval{Lo: lo, Hi: hi, Edits: es} }
	for _, tc := range []struct {
		name string
		in   []*pb.Interval
		err  string
	}{
		{"empty reply", nil, ""},
		{"every kind", []*pb.Interval{iv(0, 10, edit(pb.EditKind_EDIT_KIND_FORCE, 1, 2, 0), edit(pb.EditKind_EDIT_KIND_DISABLE, 0, 0, 0),
			edit(pb.EditKind_EDIT_KIND_ADD_COST, 0, 1, -5), edit(pb.EditKind_EDIT_KIND_SCALE_COST, 4, 2, 0.5),
			edit(pb.EditKind_EDIT_KIND_CHANNELS, 0, 0, 64), edit(pb.EditKind_EDIT_KIND_CHUNK, 0, 0, 1<<20)), iv(10, math.MaxInt64)}, ""},
		{"unspecified kind", []*pb.Interval{iv(0, 10, edit(pb.EditKind_EDIT_KIND_UNSPECIFIED, 1, 2, 0))}, "unknown edit kind 0"},
		{"unknown kind", []*pb.Interval{iv(0, 10, edit(42, 1, 2, 0))}, "unknown edit kind 42"},
		{"nan", []*pb.Interval{iv(0, 10, edit(pb.EditKind_EDIT_KIND_ADD_COST, 1, 2, math.NaN()))}, "not finite"},
		{"inf", []*pb.Interval{iv(0, 10, edit(pb.EditKind_EDIT_KIND_SCALE_COST, 1, 2, math.Inf(1)))}, "not finite"},
		{"negative scale", []*pb.Interval{iv(0, 10, edit(pb.EditKind_EDIT_KIND_SCALE_COST, 1, 2, -1))}, "scale -1"},
		{"huge add", []*pb.Interval{iv(0, 10, edit(pb.EditKind_EDIT_KIND_ADD_COST, 1, 2, 1e12))}, "out of range"},
		{"negative channels", []*pb.Interval{iv(0, 10, edit(pb.EditKind_EDIT_KIND_CHANNELS, 0, 0, -1))}, "channels -1"},
		{"too many channels", []*pb.Interval{iv(0, 10, edit(pb.EditKind_EDIT_KIND_CHANNELS, 0, 0, 65))}, "channels 65"},
		{"fractional channels", []*pb.Interval{iv(0, 10, edit(pb.EditKind_EDIT_KIND_CHANNELS, 0, 0, 1.5))}, "channels 1.5"},
		{"negative chunk", []*pb.Interval{iv(0, 10, edit(pb.EditKind_EDIT_KIND_CHUNK, 0, 0, -512))}, "chunk -512"},
		{"algo out of range", []*pb.Interval{iv(0, 10, edit(pb.EditKind_EDIT_KIND_FORCE, 7, 0, 0))}, "cell (7, 0)"},
		{"proto out of range", []*pb.Interval{iv(0, 10, edit(pb.EditKind_EDIT_KIND_DISABLE, 0, -1, 0))}, "cell (0, -1)"},
		{"negative lo", []*pb.Interval{iv(-1, 10)}, "interval 0 [-1, 10)"},
		{"empty interval", []*pb.Interval{iv(5, 5)}, "interval 0 [5, 5)"},
		{"overlap", []*pb.Interval{iv(0, 10), iv(9, 20)}, "interval 1 [9, 20)"},
		{"unsorted", []*pb.Interval{iv(10, 20), iv(0, 5)}, "interval 1 [0, 5)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ivs, err := intervalsFromProto(tc.in)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			back, err := intervalsToProto(ivs)
			require.NoError(t, err)
			again, err := intervalsFromProto(back)
			require.NoError(t, err)
			assert.Equal(t, ivs, again)
		})
	}
}

func TestLeavesACell(t *testing.T) {
	n, err := tables.Load("h100")
	require.NoError(t, err)
	topo, err := capabilities.FromNode(n, 1)
	require.NoError(t, err)
	pl, err := planner.New(&topo, planner.Config{})
	require.NoError(t, err)
	m, err := pl.Menu(planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1})
	require.NoError(t, err)
	var all []planner.Edit
	for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
		for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
			if m.Cells[a][p].Reason == "" && a != costmodel.Ring {
				all = append(all, planner.Edit{Kind: planner.Disable, Cell: planner.Cell{Algo: a, Proto: p}})
			}
		}
	}
	assert.NoError(t, leavesACell([]planner.Interval{{Lo: 0, Hi: 10, Edits: all}}, m), "Ring is left")
	for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
		all = append(all, planner.Edit{Kind: planner.Disable, Cell: planner.Cell{Algo: costmodel.Ring, Proto: p}})
	}
	assert.ErrorContains(t, leavesACell([]planner.Interval{{Lo: 0, Hi: 10}, {Lo: 10, Hi: 20, Edits: all}}, m), "interval 1 [10, 20) disables every legal cell")
}

func TestSummary(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"[DEBUG] plugin address address=/tmp/x\npanic: boom\n\ngoroutine 1 [running]:\n\tmain.go:3", "panic: boom"},
		{"[INFO] hello\n[ERROR] policy panicked op=tune panic=boom stack=goroutine 7\n\tx.go:1", "[ERROR] policy panicked op=tune panic=boom stack=goroutine 7"},
		{"[DEBUG] plugin address\ntuner-fault: exiting mid-compile", "tuner-fault: exiting mid-compile"},
		{"[DEBUG] only debug", ""},
	} {
		assert.Equal(t, tc.want, summary(tc.in), "%q", tc.in)
	}
	tl := newTail(128)
	_, _ = tl.Write([]byte(`{"@level":"error","@message":"policy panicked","@timestamp":"x","panic":"boom"}` + "\n"))
	assert.Equal(t, "[ERROR] policy panicked panic=boom", tl.String())
	_, _ = tl.Write([]byte("0123456789012345678901234567890123456789012345678901234567890123456789\n"))
	out := tl.String()
	assert.LessOrEqual(t, len(out), 128, "the tail keeps the last bytes")
	assert.True(t, strings.HasSuffix(out, "\n0123456789012345678901234567890123456789012345678901234567890123456789"), out)
}
