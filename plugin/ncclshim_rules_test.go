package plugin_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/plugin/shimtable"
	"github.com/collplan/collplan/tables"
)

// TestShimRules: a table compiled with rules (docs/tuner-rules.md) is an ordinary table to the
// shim, which forces the rules' pins and channels: the conformance cases of a rules table, whose
// expectations come from the Go reader's Lookup, through every ABI (native run only: the reader
// and the hot path are the ones TestShimValgrind already covers).
func TestShimRules(t *testing.T) {
	b := shim(t)
	rs, err := shimtable.ParseRules("rules.toml", []byte(`[[rule]]
nodes = 2
ranks = 16
coll = "allreduce"
max_bytes = 65535
algo = "ring"
proto = "ll"
channels = 4

[[rule]]
coll = "allgather"
min_bytes = 1048576
node = "b200"
`))
	require.NoError(t, err)
	n, err := tables.Load("h100")
	require.NoError(t, err)
	// Priced by 2.28's model, which the file records and the shim's init names.
	rel := costmodel.Release{Major: 2, Minor: 28, Patch: 3}
	tb, err := shimtable.Compile(context.Background(), shimtable.Request{Node: n, Nodes: []int{2}, Rules: rs, Release: rel})
	require.NoError(t, err)
	require.Equal(t, 1, tb.Lookup(2, 16, 4, 1, 8192)[0].Algo, "the pin is in the table")
	require.Equal(t, 4, tb.Lookup(2, 16, 4, 1, 8192)[0].Channels)
	data := encode(t, tb)
	table := writeFile(t, "rules.cpln", data)
	cs := conformance(rand.New(rand.NewPCG(17, 4)), tb, shimtable.Checksum(data), [][2]int{{1, 8}})
	cs.directive("expect-log priced by NCCL 2.28.3's model")
	out := run(t, cleanEnv("COLLPLAN_TUNER_TABLE="+table), b.harness, "cases", b.so, cs.write(t, "rules.cases", 1))
	t.Logf("%d case lines; %s", len(cs.lines), strings.TrimSpace(out))
}

// namedRules has a rule of every kind: a pin for every communicator of a shape, a pin with channels
// for a glob of names, a pin for an exact name, a node table for a glob, and a name no comm has.
const namedRules = `[[rule]]
nodes = 2
ranks = 16
coll = "allreduce"
max_bytes = 65535
algo = "ring"
proto = "ll"
channels = 4

[[rule]]
comm = "dp-*"
nodes = 2
coll = "allreduce"
max_bytes = 1048576
algo = "tree"
proto = "simple"
channels = 2

[[rule]]
comm = "tp-7"
ranks = 8
coll = "allgather"
algo = "ring"
proto = "ll128"

[[rule]]
comm = "pp-*"
coll = "reduce"
node = "b200"

[[rule]]
comm = "nobody"
coll = "broadcast"
algo = "ring"
proto = "simple"
`

type namedComm struct {
	name           string // "" none
	order          string // early, late, none
	nNodes, nRanks int
}

// namedCases writes the rules harness's cases for comms, each making calls of every collective
// at sampled sizes. The expectation is the Go reader's: LookupComm with the comm's name when the
// name is known at its first call (early), else the shape's block (Lookup) for the comm's life.
func namedCases(t *testing.T, tb *shimtable.Table, comms []namedComm, rng *rand.Rand) (file string, named, unknown, differ int) {
	var b strings.Builder
	sizes := []int64{0, 1000, 8192, 65535, 65536, 500000, 1048576, 1048577, 1 << 26}
	for i, c := range comms {
		name := c.name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(&b, "comm %d %x %d %d %s %s\n", i, uint64(0x1000+i)*0x9E3779B97F4A7C15>>8, c.nNodes, c.nRanks, name, c.order)
		known := c.name
		if c.order != "early" {
			known = ""
		}
		for _, nm := range tb.Named {
			blk := tb.Blocks[nm.Block]
			if ok, _ := path.Match(nm.Comm, known); ok && known != "" && blk.NNodes == c.nNodes && blk.NRanks == c.nRanks {
				named++
				break
			}
		}
		if known == "" {
			unknown++
		}
		for k := 0; k < 4; k++ {
			coll := rng.IntN(5)
			size := sizes[rng.IntN(len(sizes))]
			plans := tb.LookupComm(known, c.nNodes, c.nRanks, coll, 1, size)
			if !slicesEqual(plans, tb.Lookup(c.nNodes, c.nRanks, coll, 1, size)) {
				differ++
			}
			cell, ch := -1, 0
			if len(plans) > 0 {
				cell, ch = plans[0].Algo*3+plans[0].Proto, plans[0].Channels
			}
			fmt.Fprintf(&b, "c %d %d 1 %d %d %d\n", i, coll, size, cell, ch)
		}
	}
	return writeFile(t, "named.cases", []byte(b.String())), named, unknown, differ
}

func slicesEqual(a, b []shimtable.Plan) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestShimNamedRules: rules naming communicators reach exactly the communicators whose commName
// the library's profiler init gave before their first call; a name that arrives late (after the
// first call) or never changes nothing for that communicator's life; thousands of communicators;
// both ABIs that carry a commId; the once-at-init notice without NCCL_PROFILER_PLUGIN; valgrind.
func TestShimNamedRules(t *testing.T) {
	b := shim(t)
	rulesHarness := filepath.Join(filepath.Dir(b.harness), "collplan-rulesharness")
	rs, err := shimtable.ParseRules("rules.toml", []byte(namedRules))
	require.NoError(t, err)
	n, err := tables.Load("h100")
	require.NoError(t, err)
	tb, err := shimtable.Compile(context.Background(), shimtable.Request{Node: n, Nodes: []int{1, 2}, Rules: rs})
	require.NoError(t, err)
	// dp-* at 2x16 and 2x2, tp-7 at 1x8, pp-* and nobody at the three shapes of more than one rank.
	require.Len(t, tb.Named, 2+1+3+3)
	table := writeFile(t, "named.cpln", encode(t, tb))

	rng := rand.New(rand.NewPCG(21, 22))
	names := []string{"dp-0", "dp-17", "tp-7", "tp-70", "pp-3", "other", "dp", ""}
	orders := []string{"early", "early", "early", "late", "none"}
	shapes := [][2]int{{1, 8}, {2, 16}, {2, 2}}
	mk := func(n int) []namedComm {
		var cs []namedComm
		for i := 0; i < n; i++ {
			sh := shapes[rng.IntN(len(shapes))]
			cs = append(cs, namedComm{name: names[rng.IntN(len(names))], order: orders[rng.IntN(len(orders))], nNodes: sh[0], nRanks: sh[1]})
		}
		return cs
	}
	comms := mk(3000)
	file, named, unknown, differ := namedCases(t, tb, comms, rng)
	require.Positive(t, differ, "some calls' named block differs from the shape's (else the run proves nothing)")
	env := cleanEnv("COLLPLAN_TUNER_TABLE="+table, "NCCL_PROFILER_PLUGIN=libnccl-tuner-collplan.so")
	out := run(t, env, rulesHarness, b.so, file)
	t.Logf("%s (%d comms named by a rule, %d with no name at their first call, %d calls changed by a name)", strings.TrimSpace(out), named, unknown, differ)

	// The log says what each communicator got, once: two ABIs per comm.
	head := fmt.Sprintf("expect-count %d commName not known at its first collective\nexpect-count %d matches named rule\n", 2*unknown, 2*named)
	file = writeFile(t, "named-logs.cases", []byte(head+"expect-count 0 NCCL_PROFILER_PLUGIN is not set\n"+readFile(t, file)))
	run(t, env, rulesHarness, b.so, file)

	// Without NCCL_PROFILER_PLUGIN the tuner says at init that named rules cannot match.
	small := comms[:40]
	file, _, _, _ = namedCases(t, tb, small, rng)
	file = writeFile(t, "named-noprof.cases", []byte(fmt.Sprintf("expect-count %d NCCL_PROFILER_PLUGIN is not set\n", 2*len(small))+readFile(t, file)))
	run(t, cleanEnv("COLLPLAN_TUNER_TABLE="+table), rulesHarness, b.so, file)

	// The profiler recording dumps too (its finalize drops the names), under valgrind.
	file, _, _, _ = namedCases(t, tb, mk(150), rng)
	env = cleanEnv("COLLPLAN_TUNER_TABLE="+table, "NCCL_PROFILER_PLUGIN=x", "COLLPLAN_PROFILE_DIR="+t.TempDir(), "COLLPLAN_PROFILE_FLUSH_S=0")
	logValgrind(t, "named", run(t, env, append(valgrindArgs, rulesHarness, b.so, file)...))
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(data)
}

// TestShimBenchAlternate is an opt-in measurement: with COLLPLAN_BENCH_BASE_SO set to a library
// built from an earlier commit, it times v6 getCollInfo (comms without rules: the h100 conformance
// table) on that library and on this one, alternated five times, the hot set and the whole set.
//
//	git show BASE:plugin/ncclshim/... (or a checkout of BASE); make -C that BUILD=/tmp/base shim
//	COLLPLAN_BENCH_BASE_SO=/tmp/base/libnccl-tuner-collplan.so go test -run TestShimBenchAlternate -v ./plugin/
func TestShimBenchAlternate(t *testing.T) {
	base := os.Getenv("COLLPLAN_BENCH_BASE_SO")
	if base == "" {
		t.Skip("opt-in: set COLLPLAN_BENCH_BASE_SO to the library to compare with")
	}
	b := shim(t)
	table, file, _ := conformanceRuns(t)[0].prepare(t, 1)
	for round := 0; round < 5; round++ {
		for _, so := range []struct{ name, path string }{{"base", base}, {"this", b.so}} {
			hot := run(t, cleanEnv("COLLPLAN_TUNER_TABLE="+table, "HARNESS_BENCH_CASES=256"), b.harness, "bench", so.path, file, "2000000")
			all := run(t, cleanEnv("COLLPLAN_TUNER_TABLE="+table), b.harness, "bench", so.path, file, "2000000")
			t.Logf("round %d %s: hot %s; all %s", round, so.name, nsPerCall.FindString(hot), nsPerCall.FindString(all))
		}
	}
}

// TestShimRefusesBadNamedSection: the C reader validates the named-communicator section and the
// release record as the Go one does (a block index outside the table, a pattern with no NUL, no
// entries, a release collplan does not model, a reserved field set) and passes through.
func TestShimRefusesBadNamedSection(t *testing.T) {
	b := shim(t)
	rs, err := shimtable.ParseRules("rules.toml", []byte("[[rule]]\ncomm = \"dp-*\"\nranks = 8\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\n"))
	require.NoError(t, err)
	n, err := tables.Load("h100")
	require.NoError(t, err)
	tb, err := shimtable.Compile(context.Background(), shimtable.Request{Node: n, Nodes: []int{1}, Rules: rs,
		Release: costmodel.Release{Major: 2, Minor: 26, Patch: 2}})
	require.NoError(t, err)
	good := encode(t, tb)
	sec := 64 + 32*len(tb.Blocks)
	rec := sec + 8 + 72*len(tb.Named) // the release record follows the named section
	rng := rand.New(rand.NewPCG(8, 8))
	for name, c := range map[string]struct {
		edit   func(d []byte)
		reason string
	}{
		"block":            {func(d []byte) { binary.LittleEndian.PutUint32(d[sec+8+64:], uint32(len(tb.Blocks))) }, "named-communicator entry 0: block"},
		"no NUL":           {func(d []byte) { copy(d[sec+8:sec+8+64], strings.Repeat("x", 64)) }, "pattern empty or not NUL-terminated"},
		"no entries":       {func(d []byte) { binary.LittleEndian.PutUint32(d[sec:], 0) }, "named-communicator section: 0 entries"},
		"release":          {func(d []byte) { binary.LittleEndian.PutUint32(d[rec:], 2<<16|17<<8) }, "NCCL 2.17.0 is not a release collplan models"},
		"release reserved": {func(d []byte) { binary.LittleEndian.PutUint32(d[rec+4:], 1) }, "release record points outside the file or its reserved field"},
	} {
		d := append([]byte{}, good...)
		c.edit(d)
		binary.LittleEndian.PutUint64(d[24:], shimtable.Checksum(d))
		p := writeFile(t, "bad-named.cpln", d)
		run(t, cleanEnv("COLLPLAN_TUNER_TABLE="+p), b.harness, "cases", b.so, passThrough(rng, c.reason).write(t, "bad-named.cases", 1))
		t.Logf("%s: refused (%s)", name, c.reason)
	}
}
