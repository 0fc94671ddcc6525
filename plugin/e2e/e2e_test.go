package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
	"github.com/collplan/collplan/plugin/policy/regions"
	"github.com/collplan/collplan/plugin/policy/rules"
	"github.com/collplan/collplan/plugin/policy/table"
	"github.com/collplan/collplan/tables"
)

// bin is where TestMain builds the tuner binaries.
var bin string

func TestMain(m *testing.M) {
	plugin.MainWithCommands(m, &bin, nil, "tuner-rules", "tuner-regions", "tuner-table", "tuner-nccl", "tuner-fault")
}

func tuner(name string) string { return filepath.Join(bin, "tuner-"+name) }

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
	return append(out, planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Bfloat16, PipeOps: 2, RegBuff: true})
}

// logBuffer collects a client's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func client(t testing.TB, name, config string, cfg plugin.Config) *plugin.Client {
	t.Helper()
	cfg.Path, cfg.ConfigPath = tuner(name), config
	if cfg.Logger == nil {
		cfg.Logger = plugin.DefaultLogger(io.Discard, hclog.Warn)
	}
	c, err := plugin.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sizes is a sweep: every power of two and its neighbours, and random sizes up to 16 TiB.
func sizes() []int64 {
	rng := rand.New(rand.NewPCG(7, 8))
	out := []int64{0}
	for k := 0; k < 51; k++ {
		out = append(out, 1<<k-1, 1<<k, 1<<k+1)
	}
	for range 400 {
		out = append(out, int64(math.Exp2(rng.Float64()*44)))
	}
	return out
}

// compare checks that two planners decide, explain and edit alike for every class and size, and
// returns the edit kinds seen where the tuned planner's decision differs from the built-in one.
func compare(t *testing.T, want, got, builtin *planner.Planner) map[planner.EditKind]bool {
	t.Helper()
	ctx := context.Background()
	changed := map[planner.EditKind]bool{}
	for _, cls := range classes() {
		wp, err := want.Prepare(ctx, cls)
		require.NoError(t, err)
		gp, err := got.Prepare(ctx, cls)
		require.NoError(t, err)
		bp, err := builtin.Prepare(ctx, cls)
		require.NoError(t, err)
		_, note := gp.Tuner()
		require.Empty(t, note)
		wt, err := wp.Compile()
		require.NoError(t, err)
		gt, err := gp.Compile()
		require.NoError(t, err)
		require.Equal(t, wt.Entries(), gt.Entries(), "%+v", cls)
		for _, n := range sizes() {
			w, err := wp.Explain(n)
			require.NoError(t, err)
			g, err := gp.Explain(n)
			require.NoError(t, err)
			require.Equal(t, w.Decision, g.Decision, "%+v at %d", cls, n)
			require.Equal(t, w.Explain.Edits, g.Explain.Edits, "%+v at %d", cls, n)
			require.Equal(t, w.Explain.Cells, g.Explain.Cells, "%+v at %d", cls, n)
			require.Equal(t, g.Decision, gt.Lookup(n), "%+v at %d", cls, n)
			b, err := bp.Explain(n)
			require.NoError(t, err)
			if b.Decision != g.Decision {
				for _, e := range g.Explain.Edits {
					changed[e.Kind] = true
				}
			}
		}
	}
	return changed
}

// TestRoundTrip: with configurations that change decisions, the host decides the same through the
// real plugin binary, through go-plugin's in-process connection and with the policy called
// directly, at every size of a sweep.
func TestRoundTrip(t *testing.T) {
	all := []planner.EditKind{planner.Force, planner.Disable, planner.AddCost, planner.ScaleCost, planner.Channels, planner.Chunk}
	for _, tc := range []struct {
		name, config string
		load         plugin.Factory
		kinds        []planner.EditKind
	}{
		{"rules", "../policy/rules/testdata/roundtrip.conf", rules.New, []planner.EditKind{planner.Force, planner.Channels}},
		{"regions", "../policy/regions/testdata/regions.toml", regions.New, all},
		{"table", "../policy/table/testdata/h100.toml", table.New, []planner.EditKind{planner.Force}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			direct, err := tc.load(tc.config)
			require.NoError(t, err)
			out := client(t, tc.name, tc.config, plugin.Config{})
			in := plugin.TestClient(t, tc.load, plugin.Config{ConfigPath: tc.config})
			changed := map[planner.EditKind]bool{}
			for _, nodes := range []int{1, 2, 4} {
				topo := h100(t, nodes)
				want, err := planner.New(topo, planner.Config{Tuner: direct})
				require.NoError(t, err)
				builtin, err := planner.New(topo, planner.Config{})
				require.NoError(t, err)
				outPl, err := out.Planner(context.Background(), topo, planner.Config{})
				require.NoError(t, err)
				inPl, err := in.Planner(context.Background(), topo, planner.Config{})
				require.NoError(t, err)
				for k := range compare(t, want, outPl, builtin) {
					changed[k] = true
				}
				compare(t, want, inPl, builtin)
			}
			for _, k := range tc.kinds {
				assert.True(t, changed[k], "no decision changed where a %s edit applies", k)
			}
		})
	}
}

// TestNCCLInit: tuner-nccl's Init replaces a fitted host model with NCCL's, out of process.
func TestNCCLInit(t *testing.T) {
	node, err := tables.LoadFile("../policy/table/testdata/h100.toml")
	require.NoError(t, err)
	k := costmodel.DefaultConstants()
	require.NoError(t, k.Apply(node.Constants))
	c := client(t, "nccl", "", plugin.Config{})
	for _, nodes := range []int{1, 2, 4} {
		topo := h100(t, nodes)
		f := correction.Default(topo)
		require.NoError(t, f.Apply(node, topo.NNodes, topo.LocalRanks))
		stock, err := planner.New(topo, planner.Config{})
		require.NoError(t, err)
		host, err := c.Planner(context.Background(), topo, planner.Config{Constants: &k, Factors: f})
		require.NoError(t, err)
		assert.Equal(t, stock.Table(), host.Table())
		compare(t, stock, host, stock)
	}
}

// TestFaults: whatever the plugin does, the planner answers with its built-in policy within 10 s,
// and both the note and the log say why.
func TestFaults(t *testing.T) {
	topo := h100(t, 2)
	builtin, err := planner.New(topo, planner.Config{})
	require.NoError(t, err)
	cls := classes()[0]
	want, err := builtin.Compile(context.Background(), cls)
	require.NoError(t, err)
	dir := t.TempDir()

	check := func(t *testing.T, personality string, cfg plugin.Config, note, logged string) {
		config := filepath.Join(dir, personality+".conf")
		require.NoError(t, os.WriteFile(config, []byte(personality+"\n"), 0o644))
		var log logBuffer
		cfg.Logger = plugin.DefaultLogger(&log, hclog.Warn)
		c := client(t, "fault", config, cfg)
		start := time.Now()
		pl, err := c.Planner(context.Background(), topo, planner.Config{})
		require.NoError(t, err)
		dt, err := pl.Compile(context.Background(), cls)
		require.NoError(t, err)
		took := time.Since(start)
		assert.Less(t, took, 10*time.Second)
		assert.Equal(t, want.Entries(), dt.Entries(), "the built-in policy's decisions")
		assert.Equal(t, "fault", dt.Tuner)
		assert.Contains(t, dt.TunerNote, "tuner fault failed, using the built-in policy: ")
		assert.Contains(t, dt.TunerNote, note)
		if logged != "" {
			assert.Contains(t, log.String(), "tuner failed; using the built-in policy")
			assert.Contains(t, log.String(), logged)
			assert.Equal(t, 1, strings.Count(log.String(), "tuner failed"), "logged once:\n%s", log.String())
		}
		// A second class during the backoff falls back at once, without a new log line.
		start = time.Now()
		dt2, err := pl.Compile(context.Background(), classes()[1])
		require.NoError(t, err)
		assert.NotEmpty(t, dt2.TunerNote)
		assert.Less(t, time.Since(start), time.Second)
		assert.LessOrEqual(t, strings.Count(log.String(), "tuner failed"), 1)
		t.Logf("%s: %s in %s", personality, dt.TunerNote, took.Round(time.Millisecond))
	}
	for _, tc := range []struct {
		personality, note, logged string
	}{
		{"panic", "plugin died or dropped the connection", "panic: tuner-fault: panicking inside Tune"},
		{"sleep", "no answer within 2s", "DeadlineExceeded"},
		{"garbage", "invalid reply: interval 0 [0, 1048576) edit 0: add: value NaN is not finite", "value NaN"},
		{"exit", "(plugin stderr: tuner-fault: exiting mid-compile)", "exiting mid-compile"},
		{"illegal", "a tuner cannot enable it", ""},
		{"disableall", "disables every legal cell", "disables every legal cell"},
		{"badinit", "init: invalid reply: constants: base_lat has 3 values, want 21", "base_lat"},
		{"badconfig", "badconfig.conf:1: badconfig refuses its configuration (InvalidArgument)", "refuses its configuration"},
	} {
		t.Run(tc.personality, func(t *testing.T) {
			t.Parallel()
			check(t, tc.personality, plugin.Config{}, tc.note, tc.logged)
		})
	}
	t.Run("nohandshake", func(t *testing.T) {
		t.Setenv("COLLPLAN_TUNER_FAULT", "nohandshake")
		check(t, "nohandshake", plugin.Config{}, "start: timeout while waiting for plugin to start", "never completing the handshake")
	})
}

// TestRestart: a plugin that crashes once is restarted after the backoff and then used.
func TestRestart(t *testing.T) {
	config := filepath.Join(t.TempDir(), "exitonce.conf")
	require.NoError(t, os.WriteFile(config, []byte("exitonce\n"), 0o644))
	c := client(t, "fault", config, plugin.Config{Backoff: 200 * time.Millisecond})
	pl, err := c.Planner(context.Background(), h100(t, 2), planner.Config{})
	require.NoError(t, err)
	cls := classes()[0]
	dt, err := pl.Compile(context.Background(), cls)
	require.NoError(t, err)
	assert.Contains(t, dt.TunerNote, "exiting mid-compile, once")
	dt, err = pl.Compile(context.Background(), cls)
	require.NoError(t, err)
	assert.Contains(t, dt.TunerNote, "plugin down after tune:")
	time.Sleep(250 * time.Millisecond)
	dt, err = pl.Compile(context.Background(), cls)
	require.NoError(t, err)
	assert.Empty(t, dt.TunerNote, "restarted")
}

// TestChecksum pins the binary: the right SHA-256 starts it, another refuses it.
func TestChecksum(t *testing.T) {
	data, err := os.ReadFile(tuner("nccl"))
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	topo := h100(t, 1)
	for _, tc := range []struct {
		name string
		pin  []byte
		note string
	}{
		{"match", sum[:], ""},
		{"mismatch", make([]byte, 32), "checksums did not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := client(t, "nccl", "", plugin.Config{SHA256: tc.pin})
			pl, err := c.Planner(context.Background(), topo, planner.Config{})
			require.NoError(t, err)
			dt, err := pl.Compile(context.Background(), classes()[0])
			require.NoError(t, err)
			if tc.note == "" {
				assert.Empty(t, dt.TunerNote)
			} else {
				assert.Contains(t, dt.TunerNote, tc.note)
			}
		})
	}
	_, err = plugin.New(plugin.Config{Path: tuner("nccl"), SHA256: []byte{1}})
	assert.ErrorContains(t, err, "sha256 pin has 1 bytes")
}

func TestResolve(t *testing.T) {
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, tc := range []struct{ in, want, err string }{
		{"none", "", ""},
		{"NONE", "", ""},
		{"", "", ""},
		{"rules", tuner("rules"), ""},
		{"tuner-rules", tuner("rules"), ""},
		{"./some/tuner", "./some/tuner", ""},
		{"nosuch", "", `tuner "nosuch" not found: no executable tuner-nosuch beside this program or on PATH; build the tuners with`},
	} {
		got, err := plugin.Resolve(tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, tc.in)
	}
	_, err := plugin.New(plugin.Config{Path: bin})
	assert.ErrorContains(t, err, "not an executable file")
}

// TestCheckCommand runs a tuner binary by hand: -check reports a configuration's errors by line,
// and without the host's cookie it refuses to serve.
func TestCheckCommand(t *testing.T) {
	out, err := exec.Command(tuner("rules"), "-check", "../policy/rules/testdata/nccl_tuner.conf").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "nccl_tuner.conf: ok (rules)")
	out, err = exec.Command(tuner("rules"), "-check", "../policy/rules/testdata/bad.conf").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "bad.conf:21: 1 fields")
	out, err = exec.Command(tuner("regions"), "-check", "../policy/regions/testdata/regions.toml").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(tuner("rules")).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "This binary is a plugin")
}

// Benchmarks: compiling a class's DecisionTable (one Tune round trip, then the compile) with the
// policy in process and through the plugin binary, and Lookup on the tables they produce.

func benchPlanners(b *testing.B) (direct, out *planner.Planner) {
	topo := h100(b, 2)
	p, err := rules.Load("../policy/rules/testdata/roundtrip.conf")
	require.NoError(b, err)
	direct, err = planner.New(topo, planner.Config{Tuner: p})
	require.NoError(b, err)
	c := client(b, "rules", "../policy/rules/testdata/roundtrip.conf", plugin.Config{})
	out, err = c.Planner(context.Background(), topo, planner.Config{})
	require.NoError(b, err)
	return direct, out
}

func BenchmarkCompile(b *testing.B) {
	direct, out := benchPlanners(b)
	topo := h100(b, 2)
	builtin, err := planner.New(topo, planner.Config{})
	require.NoError(b, err)
	in := plugin.TestClient(b, rules.New, plugin.Config{ConfigPath: "../policy/rules/testdata/roundtrip.conf"})
	inPl, err := in.Planner(context.Background(), topo, planner.Config{})
	require.NoError(b, err)
	cls := classes()[0]
	for _, bc := range []struct {
		name string
		pl   *planner.Planner
	}{{"no-tuner", builtin}, {"in-process", direct}, {"grpc-in-process", inPl}, {"plugin", out}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				dt, err := bc.pl.Compile(context.Background(), cls)
				if err != nil || dt.TunerNote != "" {
					b.Fatal(err, dt.TunerNote)
				}
			}
		})
	}
}

func BenchmarkTune(b *testing.B) {
	_, out := benchPlanners(b)
	p, err := rules.Load("../policy/rules/testdata/roundtrip.conf")
	require.NoError(b, err)
	cls := classes()[0]
	for _, bc := range []struct {
		name string
		pl   *planner.Planner
	}{{"plugin", out}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				pr, err := bc.pl.Prepare(context.Background(), cls)
				if err != nil {
					b.Fatal(err)
				}
				if _, note := pr.Tuner(); note != "" {
					b.Fatal(note)
				}
			}
		})
	}
	pl, err := planner.New(h100(b, 2), planner.Config{Tuner: p})
	require.NoError(b, err)
	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			if _, err := pl.Prepare(context.Background(), cls); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkStart(b *testing.B) {
	topo := h100(b, 2)
	cls := classes()[0]
	for b.Loop() {
		c, err := plugin.New(plugin.Config{Path: tuner("rules"), ConfigPath: "../policy/rules/testdata/roundtrip.conf",
			Logger: plugin.DefaultLogger(io.Discard, hclog.Warn)})
		require.NoError(b, err)
		pl, err := c.Planner(context.Background(), topo, planner.Config{})
		require.NoError(b, err)
		dt, err := pl.Compile(context.Background(), cls)
		if err != nil || dt.TunerNote != "" {
			b.Fatal(err, dt.TunerNote)
		}
		_ = c.Close()
	}
}

func BenchmarkLookup(b *testing.B) {
	direct, out := benchPlanners(b)
	cls := classes()[0]
	for _, bc := range []struct {
		name string
		pl   *planner.Planner
	}{{"in-process", direct}, {"plugin", out}} {
		dt, err := bc.pl.Compile(context.Background(), cls)
		require.NoError(b, err)
		rng := rand.New(rand.NewPCG(9, 10))
		ns := make([]int64, 1024)
		for i := range ns {
			ns[i] = int64(math.Exp2(rng.Float64() * 40))
		}
		b.Run(bc.name, func(b *testing.B) {
			var sink planner.Decision
			i := 0
			for b.Loop() {
				sink = dt.Lookup(ns[i&1023])
				i++
			}
			_ = sink
		})
	}
}

// TestNoSocketLeft: a plugin's unix socket (and the directory the host makes for it) is gone once
// the client is closed, after a clean run and after a crash. Every command that used a plugin left
// a TMPDIR/pluginNNNN socket behind before (hundreds after a day's use).
func TestNoSocketLeft(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	crash := filepath.Join(t.TempDir(), "exit.conf")
	require.NoError(t, os.WriteFile(crash, []byte("exit\n"), 0o644))
	for _, tc := range []struct{ name, config string }{{"nccl", ""}, {"fault", crash}} {
		c := client(t, tc.name, tc.config, plugin.Config{})
		pl, err := c.Planner(context.Background(), h100(t, 1), planner.Config{})
		require.NoError(t, err)
		_, err = pl.Compile(context.Background(), classes()[0])
		require.NoError(t, err)
		require.NoError(t, c.Close())
		ents, err := os.ReadDir(tmp)
		require.NoError(t, err)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		assert.Empty(t, names, "%s: left in TMPDIR", tc.name)
	}
}
