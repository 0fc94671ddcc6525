package plugin_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/plugin/policy/nccl"
	"github.com/collplan/collplan/plugin/policy/regions"
	"github.com/collplan/collplan/plugin/policy/rules"
	"github.com/collplan/collplan/plugin/policy/table"
	"github.com/collplan/collplan/tables"
)

func h100(t testing.TB, nodes int) *capabilities.Topology {
	t.Helper()
	n, err := tables.Load("h100")
	require.NoError(t, err)
	topo, err := capabilities.FromNode(n, nodes)
	require.NoError(t, err)
	return &topo
}

func classes() []planner.Class {
	var out []planner.Class
	for _, c := range []costmodel.Coll{costmodel.AllReduce, costmodel.AllGather, costmodel.Broadcast} {
		out = append(out, planner.Class{Coll: c, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1})
	}
	out = append(out, planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Bfloat16, PipeOps: 2, RegBuff: true})
	return out
}

// sameDecisions compares two planners class by class: equal DecisionTables, and equal plans and
// edits at sizes spread over the whole range.
func sameDecisions(t *testing.T, want, got *planner.Planner) {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	ctx := context.Background()
	for _, cls := range classes() {
		wp, err := want.Prepare(ctx, cls)
		require.NoError(t, err)
		gp, err := got.Prepare(ctx, cls)
		require.NoError(t, err)
		_, note := gp.Tuner()
		require.Empty(t, note)
		wt, err := wp.Compile()
		require.NoError(t, err)
		gt, err := gp.Compile()
		require.NoError(t, err)
		require.Equal(t, wt.Entries(), gt.Entries(), "%+v", cls)
		for range 300 {
			n := int64(math.Exp2(rng.Float64() * 44))
			w, err := wp.Explain(n)
			require.NoError(t, err)
			g, err := gp.Explain(n)
			require.NoError(t, err)
			require.Equal(t, w.Decision, g.Decision, "%+v at %d", cls, n)
			require.Equal(t, w.Explain.Edits, g.Explain.Edits, "%+v at %d", cls, n)
			require.Equal(t, w.Explain.Cells, g.Explain.Cells, "%+v at %d", cls, n)
		}
	}
}

func factory[T planner.Tuner](load func(string) (T, error)) plugin.Factory {
	return func(p string) (planner.Tuner, error) { return load(p) }
}

// TestInProcessRoundTrip runs each policy over go-plugin's in-process gRPC connection and checks
// the host decides exactly as with the policy called directly.
func TestInProcessRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		load         plugin.Factory
	}{
		{"rules", "policy/rules/testdata/roundtrip.conf", factory(rules.Load)},
		{"regions", "policy/regions/testdata/regions.toml", factory(regions.Load)},
		{"table", "policy/table/testdata/h100.toml", factory(table.Load)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			direct, err := tc.load(tc.config)
			require.NoError(t, err)
			c := plugin.TestClient(t, tc.load, plugin.Config{ConfigPath: tc.config})
			for _, nodes := range []int{1, 2, 4} {
				topo := h100(t, nodes)
				want, err := planner.New(topo, planner.Config{Tuner: direct})
				require.NoError(t, err)
				got, err := c.Planner(context.Background(), topo, planner.Config{})
				require.NoError(t, err)
				sameDecisions(t, want, got)
			}
		})
	}
}

// TestFittedCellsRoundTrip: a host that prices some cells from a fitted overlay (planner
// Config.Cells) sends them marked as fitted, and the plugin prices them alike: no fallback, and the
// decisions are those of the policy called directly over the same fitted host.
func TestFittedCellsRoundTrip(t *testing.T) {
	cells := []planner.CellOverride{
		{Coll: costmodel.AllReduce, Algo: costmodel.Ring, Proto: costmodel.LL, LatUS: 0.75, BWGBps: 3.5},
		{Coll: costmodel.AllReduce, Algo: costmodel.Ring, Proto: costmodel.Simple, LatUS: 9, BWGBps: 400},
		{Coll: costmodel.AllGather, Algo: costmodel.Ring, Proto: costmodel.LL128, LatUS: 2, BWGBps: 50},
	}
	const conf = "policy/rules/testdata/roundtrip.conf"
	direct, err := rules.Load(conf)
	require.NoError(t, err)
	c := plugin.TestClient(t, factory(rules.Load), plugin.Config{ConfigPath: conf})
	for _, nodes := range []int{1, 2} {
		topo := h100(t, nodes)
		want, err := planner.New(topo, planner.Config{Tuner: direct, Cells: cells})
		require.NoError(t, err)
		plain, err := planner.New(topo, planner.Config{Tuner: direct})
		require.NoError(t, err)
		require.NotEqual(t, plain.Table(), want.Table(), "the fitted cells change the model")
		got, err := c.Planner(context.Background(), topo, planner.Config{Cells: cells})
		require.NoError(t, err)
		sameDecisions(t, want, got)
	}
}

// TestInitReplacesModel: the nccl policy's Init hands NCCL's defaults to a host that prices with
// a fitted table, which then decides as stock NCCL.
func TestInitReplacesModel(t *testing.T) {
	node, err := tables.LoadFile("policy/table/testdata/h100.toml")
	require.NoError(t, err)
	k := costmodel.DefaultConstants()
	require.NoError(t, k.Apply(node.Constants))
	c := plugin.TestClient(t, nccl.New, plugin.Config{})
	for _, nodes := range []int{1, 2, 4} {
		topo := h100(t, nodes)
		f := correction.Default(topo)
		require.NoError(t, f.Apply(node, topo.NNodes, topo.LocalRanks))
		fitted, err := planner.New(topo, planner.Config{Constants: &k, Factors: f})
		require.NoError(t, err)
		stock, err := planner.New(topo, planner.Config{})
		require.NoError(t, err)
		host, err := c.Planner(context.Background(), topo, planner.Config{Constants: &k, Factors: f})
		require.NoError(t, err)
		assert.Equal(t, stock.Table(), host.Table(), "the host prices with NCCL's constants")
		sameDecisions(t, stock, host)
		cls := classes()[0]
		a, err := fitted.Compile(context.Background(), cls)
		require.NoError(t, err)
		b, err := host.Compile(context.Background(), cls)
		require.NoError(t, err)
		assert.NotEqual(t, a.Entries(), b.Entries(), "%d nodes: the fitted model decides differently", nodes)
	}
}

// scripted is a policy whose Tune runs a function, to misbehave in process.
type scripted struct {
	tune func() ([]planner.Interval, error)
}

func (s scripted) Name() string { return "scripted" }
func (s scripted) Tune(context.Context, *planner.Request) ([]planner.Interval, error) {
	return s.tune()
}

func note(t *testing.T, pl *planner.Planner) string {
	t.Helper()
	pr, err := pl.Prepare(context.Background(), classes()[0])
	require.NoError(t, err)
	_, n := pr.Tuner()
	return n
}

// TestInProcessFallbacks: a policy that panics, errs, hangs, refuses its configuration or forces an
// illegal cell leaves the planner on its built-in policy with the reason noted; a broken plugin is
// restarted after the backoff.
func TestInProcessFallbacks(t *testing.T) {
	topo := h100(t, 2)
	cfg := plugin.Config{CallTimeout: 300 * time.Millisecond, Backoff: 100 * time.Millisecond,
		Logger: plugin.DefaultLogger(testWriter{t}, hclog.Warn)}

	t.Run("panic then recover", func(t *testing.T) {
		var calls atomic.Int32
		f := func(string) (planner.Tuner, error) {
			return scripted{func() ([]planner.Interval, error) {
				if calls.Add(1) == 1 {
					panic("boom")
				}
				return nil, nil
			}}, nil
		}
		c := plugin.TestClient(t, f, cfg)
		pl, err := c.Planner(context.Background(), topo, planner.Config{})
		require.NoError(t, err)
		assert.Contains(t, note(t, pl), "policy panicked: boom")
		assert.Contains(t, note(t, pl), "plugin down after tune:", "within the backoff the plugin is not restarted")
		time.Sleep(150 * time.Millisecond)
		assert.Empty(t, note(t, pl), "restarted after the backoff")
	})
	t.Run("policy error keeps the plugin", func(t *testing.T) {
		var calls atomic.Int32
		f := func(string) (planner.Tuner, error) {
			return scripted{func() ([]planner.Interval, error) {
				if calls.Add(1) == 1 {
					return nil, errors.New("no answer for this class")
				}
				return nil, nil
			}}, nil
		}
		c := plugin.TestClient(t, f, cfg)
		pl, err := c.Planner(context.Background(), topo, planner.Config{})
		require.NoError(t, err)
		assert.Contains(t, note(t, pl), "tune: no answer for this class (Unknown)")
		assert.Empty(t, note(t, pl), "no restart, no backoff")
	})
	t.Run("hang", func(t *testing.T) {
		block := make(chan struct{})
		defer close(block)
		f := func(string) (planner.Tuner, error) {
			return scripted{func() ([]planner.Interval, error) { <-block; return nil, nil }}, nil
		}
		c := plugin.TestClient(t, f, cfg)
		pl, err := c.Planner(context.Background(), topo, planner.Config{})
		require.NoError(t, err)
		start := time.Now()
		assert.Contains(t, note(t, pl), "no answer within 300ms")
		assert.Less(t, time.Since(start), 2*time.Second)
	})
	t.Run("bad configuration", func(t *testing.T) {
		c := plugin.TestClient(t, factory(rules.Load), plugin.Config{ConfigPath: "policy/rules/testdata/bad.conf", Logger: cfg.Logger})
		pl, err := c.Planner(context.Background(), topo, planner.Config{})
		require.NoError(t, err)
		assert.Contains(t, note(t, pl), "configure: rules: ")
		assert.Contains(t, note(t, pl), "bad.conf:2: 7 fields")
	})
	t.Run("illegal cell", func(t *testing.T) {
		f := func(string) (planner.Tuner, error) {
			return scripted{func() ([]planner.Interval, error) {
				return []planner.Interval{{Lo: 0, Hi: 100, Edits: []planner.Edit{{Kind: planner.Force,
					Cell: planner.Cell{Algo: costmodel.CollNetDirect, Proto: costmodel.Simple}}}}}, nil
			}}, nil
		}
		c := plugin.TestClient(t, f, cfg)
		pl, err := c.Planner(context.Background(), topo, planner.Config{})
		require.NoError(t, err)
		assert.Contains(t, note(t, pl), "a tuner cannot enable it")
	})
}

// testWriter sends log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
