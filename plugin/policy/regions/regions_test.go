package regions

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

func TestLineSpans(t *testing.T) {
	square := []Point{{0, 0}, {4, 0}, {4, 4}, {0, 4}}
	// A U shape: two prongs joined at the bottom.
	u := []Point{{0, 0}, {6, 0}, {6, 4}, {4, 4}, {4, 2}, {2, 2}, {2, 4}, {0, 4}}
	tri := []Point{{0, 0}, {4, 0}, {2, 4}}
	for _, tc := range []struct {
		name string
		poly []Point
		y    float64
		want []span
	}{
		{"square inside", square, 2, []span{{0, 4}}},
		{"square bottom edge", square, 0, []span{{0, 4}}},
		{"square top edge", square, 4, []span{{0, 4}}},
		{"square above", square, 4.5, nil},
		{"u prongs", u, 3, []span{{0, 2}, {4, 6}}},
		{"u inner bottom", u, 2, []span{{0, 6}}},
		{"u top edges", u, 4, []span{{0, 2}, {4, 6}}},
		{"triangle middle", tri, 2, []span{{1, 3}}},
		{"triangle apex", tri, 4, []span{{2, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, lineSpans(tc.poly, tc.y))
		})
	}
}

func TestByteRange(t *testing.T) {
	for _, tc := range []struct {
		s      span
		lo, hi int64
		ok     bool
	}{
		{span{0, 10}, 1, 1025, true},
		{span{10, 10}, 1024, 1025, true},
		{span{-3, 0}, 1, 2, true},
		{span{-3, -1}, 0, 0, false},
		{span{10.5, 10.6}, 1449, 1553, true}, // 2^10.5 = 1448.15, 2^10.6 = 1552.09
		{span{10.01, 10.02}, 0, 0, false},    // 1031.1 .. 1038.3: 1032..1038
		{span{32, 40}, 1 << 32, 1<<40 + 1, true},
	} {
		lo, hi, ok := byteRange(tc.s)
		if tc.s == (span{10.01, 10.02}) {
			assert.Equal(t, []int64{1032, 1039}, []int64{lo, hi})
			continue
		}
		assert.Equal(t, tc.ok, ok, "%v", tc.s)
		if tc.ok {
			assert.Equal(t, []int64{tc.lo, tc.hi}, []int64{lo, hi}, "%v", tc.s)
		}
	}
	// Past 2^53 sizes are compared through their float64 log2, which rounds: the bounds are the
	// exact sizes where that comparison flips.
	lo, hi, ok := byteRange(span{62, 64})
	require.True(t, ok)
	assert.Equal(t, int64(math.MaxInt64), hi)
	assert.True(t, log2(lo) >= 62 && log2(lo-1) < 62, "lo %d", lo)
}

func TestParseErrors(t *testing.T) {
	good := "coll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\npolygon = [[0, 0], [10, 0], [10, 5]]\n"
	for _, tc := range []struct {
		name, body, err string
	}{
		{"good", good, ""},
		{"nccl algo names", "coll = \"allreduce\"\nalgo = \"NVLSTree\"\nproto = \"Simple\"\npolygon = [[0, 0], [10, 0], [10, 5]]\n", ""},
		{"unknown key", good + "colour = 1\n", "unknown keys: region.colour"},
		{"bad coll", "coll = \"alltoall\"\nalgo = \"ring\"\nproto = \"ll\"\npolygon = [[0, 0], [10, 0], [10, 5]]\n", "region 1: coll"},
		{"two vertices", "coll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\npolygon = [[0, 0], [10, 0]]\n", "2 vertices"},
		{"bowtie", "coll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\npolygon = [[0, 0], [10, 10], [10, 0], [0, 5]]\n", "cross"},
		{"flat", "coll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\npolygon = [[0, 0], [5, 0], [10, 0]]\n", "zero area"},
		{"out of space", "coll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\npolygon = [[0, 0], [70, 0], [10, 5]]\n", "outside"},
		{"3d vertex", "coll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\npolygon = [[0, 0, 1], [10, 0], [10, 5]]\n", "3 coordinates"},
		{"add without value", good + "action = \"add\"\n", "needs a value"},
		{"negative scale", good + "action = \"scale\"\nvalue = -1.0\n", "out of range"},
		{"value on force", good + "value = 1.0\n", "add and scale only"},
		{"bad action", good + "action = \"boost\"\n", "action \"boost\""},
		{"channels", good + "channels = 65\n", "channels 65"},
		{"syntax", "coll = \n", "regions: r.toml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("r.toml", []byte("[[region]]\n"+tc.body))
			if tc.err == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tc.err)
			}
		})
	}
	_, err := Parse("r.toml", []byte("# nothing\n"))
	assert.ErrorContains(t, err, "no [[region]]")
}

// inside is an independent closed point-in-polygon test: on an edge, or an odd ray crossing count.
func inside(poly []Point, x, y float64) bool {
	in := false
	for i := range poly {
		a, b := poly[i], poly[(i+1)%len(poly)]
		if orient(a, b, Point{x, y}) == 0 && onSegment(a, b, Point{x, y}) {
			return true
		}
		if (a.Y > y) != (b.Y > y) && x < a.X+(y-a.Y)*(b.X-a.X)/(b.Y-a.Y) {
			in = !in
		}
	}
	return in
}

func topology(t *testing.T, nodes int) *capabilities.Topology {
	t.Helper()
	n, err := tables.Load("h100")
	require.NoError(t, err)
	topo, err := capabilities.FromNode(n, nodes)
	require.NoError(t, err)
	return &topo
}

func request(t *testing.T, topo *capabilities.Topology, coll costmodel.Coll) *planner.Request {
	t.Helper()
	pl, err := planner.New(topo, planner.Config{})
	require.NoError(t, err)
	m, err := pl.Menu(planner.Class{Coll: coll, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1})
	require.NoError(t, err)
	return &planner.Request{Topology: topo, Class: m.Class, Menu: m}
}

// TestTuneMatchesPointQueries checks, at many sizes and rank counts, that the intervals Tune
// answers hold exactly the sizes whose point lies in the first applicable region.
func TestTuneMatchesPointQueries(t *testing.T) {
	p, err := Load("testdata/regions.toml")
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, nodes := range []int{1, 2, 4, 8} {
		for _, coll := range []costmodel.Coll{costmodel.AllReduce, costmodel.AllGather} {
			req := request(t, topology(t, nodes), coll)
			ivs, err := p.Tune(context.Background(), req)
			require.NoError(t, err)
			y := math.Log2(float64(req.Topology.NRanks))
			sizes := []int64{0, 1, 2, 3}
			for k := 0; k < 62; k++ {
				sizes = append(sizes, 1<<k-1, 1<<k, 1<<k+1)
			}
			for _, iv := range ivs {
				sizes = append(sizes, iv.Lo-1, iv.Lo, iv.Hi-1, iv.Hi)
			}
			for range 3000 {
				sizes = append(sizes, int64(math.Exp2(rng.Float64()*45)))
			}
			for _, n := range sizes {
				if n < 0 || n == math.MaxInt64 { // intervals end at MaxInt64, exclusive
					continue
				}
				var want []planner.Edit
				if n >= 1 {
					for i := range p.Regions {
						r := &p.Regions[i]
						if r.Coll == coll && req.Menu.Cells[r.Cell.Algo][r.Cell.Proto].Reason == "" && inside(r.Polygon, math.Log2(float64(n)), y) {
							want = r.edits()
							break
						}
					}
				}
				var got []planner.Edit
				for _, iv := range ivs {
					if n >= iv.Lo && n < iv.Hi {
						got = iv.Edits
					}
				}
				require.Equal(t, want, got, "nodes %d %s size %d", nodes, coll, n)
			}
		}
	}
}

// TestActionsChangeDecisions runs the policy as the planner's tuner in process: every action of
// the test file changes some decision.
func TestActionsChangeDecisions(t *testing.T) {
	p, err := Load("testdata/regions.toml")
	require.NoError(t, err)
	seen := map[planner.EditKind]bool{}
	for _, nodes := range []int{2, 4} {
		topo := topology(t, nodes)
		base, err := planner.New(topo, planner.Config{})
		require.NoError(t, err)
		tuned, err := planner.New(topo, planner.Config{Tuner: p})
		require.NoError(t, err)
		cls := planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
		bp, err := base.Prepare(context.Background(), cls)
		require.NoError(t, err)
		tp, err := tuned.Prepare(context.Background(), cls)
		require.NoError(t, err)
		for x := 0.0; x < 40; x += 1.0 / 32 {
			n := int64(math.Exp2(x))
			b, err := bp.Explain(n)
			require.NoError(t, err)
			tt, err := tp.Explain(n)
			require.NoError(t, err)
			if b.Decision != tt.Decision {
				for _, e := range tt.Explain.Edits {
					seen[e.Kind] = true
				}
			}
		}
	}
	for _, k := range []planner.EditKind{planner.Force, planner.Disable, planner.AddCost, planner.ScaleCost, planner.Channels, planner.Chunk} {
		assert.True(t, seen[k], "no decision changed where a %s edit applies", k)
	}
}
