package shimtable

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/tables"
)

// TestParseRulesErrors: every bad rule is an error naming the file, the line of the offending key
// (counted by hand in each text) and the field.
func TestParseRulesErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"no coll", "[[rule]]\nalgo = \"ring\"\nproto = \"ll\"\n", "r.toml:1: rule 1: coll: missing"},
		{"bad coll", "[[rule]]\n\ncoll = \"allfoo\"\nalgo = \"ring\"\nproto = \"ll\"\n", "r.toml:3: rule 1: coll: unknown collective"},
		{"bad algo", "[[rule]]\ncoll = \"allreduce\"\nalgo = \"rung\"\nproto = \"ll\"\n", "r.toml:3: rule 1: algo: unknown algorithm"},
		{"bad proto", "[[rule]]\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll64\"\n", "r.toml:4: rule 1: proto:"},
		{"no proto", "[[rule]]\ncoll = \"allreduce\"\nalgo = \"ring\"\n", "r.toml:1: rule 1: proto: missing"},
		{"nothing pinned", "[[rule]]\ncoll = \"allreduce\"\n", "r.toml:1: rule 1: algo: missing"},
		{"pin and node", "[[rule]]\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\nnode = \"b200\"\n", "r.toml:5: rule 1: node: a rule pins a cell"},
		{"channels", "[[rule]]\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\nchannels = 65\n", "r.toml:5: rule 1: channels: 65 out of range 1..64"},
		{"max below min", "[[rule]]\ncoll = \"allreduce\"\nmin_bytes = 10\nmax_bytes = 9\nalgo = \"ring\"\nproto = \"ll\"\n", "r.toml:4: rule 1: max_bytes: 9 is below min_bytes 10"},
		{"negative min", "[[rule]]\ncoll = \"allreduce\"\nmin_bytes = -1\nalgo = \"ring\"\nproto = \"ll\"\n", "r.toml:3: rule 1: min_bytes: -1 is negative"},
		{"nodes 0", "[[rule]]\nnodes = 0\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\n", "r.toml:2: rule 1: nodes: 0 out of range"},
		{"fewer ranks than nodes", "[[rule]]\nnodes = 4\nranks = 2\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\n", "r.toml:3: rule 1: ranks: 2 ranks on 4 nodes"},
		{"pipe ops", "[[rule]]\ncoll = \"allreduce\"\npipe_ops = 65\nalgo = \"ring\"\nproto = \"ll\"\n", "r.toml:3: rule 1: pipe_ops: 65 out of range 1..64"},
		{"bad glob", "[[rule]]\ncomm = \"dp-[\"\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\n", "r.toml:2: rule 1: comm: bad glob"},
		{"second rule", "[[rule]]\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\n\n[[rule]]\ncoll = \"reduce\"\nalgo = \"ring\"\nproto = \"l\"\n", "r.toml:9: rule 2: proto:"},
		{"unknown key", "[[rule]]\ncoll = \"allreduce\"\nalog = \"ring\"\n", `unknown key "rule.alog"`},
		{"not toml", "[[rule]\n", "rules: r.toml: toml:"},
		{"wrong type", "[[rule]]\nnodes = \"two\"\n", "rules: r.toml: toml:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRules("r.toml", []byte(tc.text))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestParseRules: the fields of a good file, defaults (any shape, sizes 0..max) included.
func TestParseRules(t *testing.T) {
	text := `# comment
[[rule]]
nodes = 2
ranks = 16
coll = "AllReduce"
pipe_ops = 2
min_bytes = 1024
max_bytes = 65535
algo = "tree"
proto = "LL128"
channels = 8

[[rule]]  # a node-table rule
coll = "all_gather"
node = "b200"
`
	rs, err := ParseRules("r.toml", []byte(text))
	require.NoError(t, err)
	require.Len(t, rs, 2)
	r := rs[0]
	assert.Equal(t, 2, r.Line)
	assert.Equal(t, []int{2, 16, 2, 8}, []int{r.NNodes, r.NRanks, r.PipeOps, r.Channels})
	assert.Equal(t, costmodel.AllReduce, r.Coll)
	assert.Equal(t, [2]int64{1024, 65535}, [2]int64{r.Min, r.Max})
	assert.True(t, r.Pinned)
	assert.Equal(t, costmodel.Tree, r.Algo)
	assert.Equal(t, costmodel.LL128, r.Proto)
	r = rs[1]
	assert.Equal(t, 13, r.Line)
	assert.Equal(t, []int{0, 0, 0}, []int{r.NNodes, r.NRanks, r.PipeOps})
	assert.Equal(t, costmodel.AllGather, r.Coll)
	assert.Equal(t, [2]int64{0, math.MaxInt64}, [2]int64{r.Min, r.Max})
	assert.False(t, r.Pinned)
	assert.Equal(t, "b200", r.Node)
}

func compileRules(t *testing.T, node string, nodes []int, text string) (*Table, error) {
	t.Helper()
	rs, err := ParseRules("r.toml", []byte(text))
	require.NoError(t, err)
	n, err := tables.Load(node)
	require.NoError(t, err)
	return Compile(context.Background(), Request{Node: n, Nodes: nodes, Rules: rs})
}

// sampleSizes is 0, every power of two and its neighbours up to 2^40, and random sizes.
func sampleSizes(rng *rand.Rand) []int64 {
	out := []int64{0}
	for b := 0; b <= 40; b++ {
		s := int64(1) << b
		out = append(out, s-1, s, s+1)
	}
	for i := 0; i < 300; i++ {
		out = append(out, rng.Int64N(1<<40))
	}
	return out
}

// TestCompileRulesPin: a pinned rule's cell (and channels) comes first at every size of its range
// on its shape and class, the compile's own ranked plans follow (less the pinned cell); everything
// else is the rule-less compile's, checked against that compile (the oracle) at sampled sizes.
// Two overlapping rules: the first in the file wins where both apply.
func TestCompileRulesPin(t *testing.T) {
	base, err := compileRules(t, "h100", []int{1, 2}, "")
	require.NoError(t, err)
	text := `[[rule]]
nodes = 2
ranks = 16
coll = "allreduce"
min_bytes = 4096
max_bytes = 65535
algo = "ring"
proto = "ll"
channels = 4

[[rule]]
nodes = 2
coll = "allreduce"
pipe_ops = 1
min_bytes = 1000
max_bytes = 1000000
algo = "tree"
proto = "simple"
`
	tb, err := compileRules(t, "h100", []int{1, 2}, text)
	require.NoError(t, err)
	// Rule 1: 2x16 only, 4 pipe-op classes. Rule 2: 2x16 and 2x2, numPipeOps 1 only.
	assert.Equal(t, []int{4, 2}, tb.Applied)
	ring := Plan{Algo: int(costmodel.Ring), Proto: int(costmodel.LL), Channels: 4}
	tree := Plan{Algo: int(costmodel.Tree), Proto: int(costmodel.Simple)}
	rng := rand.New(rand.NewPCG(7, 8))
	sizes := sampleSizes(rng)
	sizes = append(sizes, 999, 1000, 4095, 4096, 65535, 65536, 1000000, 1000001)
	both := 0
	for _, b := range base.Blocks {
		for c := 0; c < int(costmodel.NumColls); c++ {
			for p := 1; p <= 4; p++ {
				for _, s := range sizes {
					want := base.Lookup(b.NNodes, b.NRanks, c, p, s)
					// The pins of the rules that cover the call, in file order (NCCL's example
					// tuner: the first rule whose cell is not IGNORE wins), then the compile's
					// ranked plans less those cells, K in all.
					var pins []Plan
					if c == int(costmodel.AllReduce) && b.NNodes == 2 && b.NRanks == 16 && s >= 4096 && s <= 65535 {
						pins = append(pins, ring)
					}
					if c == int(costmodel.AllReduce) && b.NNodes == 2 && p == 1 && s >= 1000 && s <= 1000000 {
						pins = append(pins, tree)
					}
					got := tb.Lookup(b.NNodes, b.NRanks, c, p, s)
					if pins == nil {
						require.Equal(t, want, got, "%dx%d coll %d pipe %d size %d", b.NNodes, b.NRanks, c, p, s)
						continue
					}
					exp := append([]Plan{}, pins...)
					for _, q := range want {
						same := false
						for _, pn := range pins {
							same = same || (q.Algo == pn.Algo && q.Proto == pn.Proto)
						}
						if !same && len(exp) < base.K {
							exp = append(exp, q)
						}
					}
					require.Equal(t, exp, got, "%dx%d coll %d pipe %d size %d", b.NNodes, b.NRanks, c, p, s)
					if len(pins) == 2 {
						both++
					}
				}
			}
		}
	}
	assert.Positive(t, both, "some sampled calls lie under both rules")
	// The file round-trips through the reader's validation.
	data, err := tb.Encode()
	require.NoError(t, err)
	back, err := Decode(data)
	require.NoError(t, err)
	assert.Equal(t, tb.Lookup(2, 16, int(costmodel.AllReduce), 3, 5000), back.Lookup(2, 16, int(costmodel.AllReduce), 3, 5000))
}

// TestCompileRulesNode: a node-table rule gives its range the other table's compile at the same
// shape (the oracle: that table compiled alone), and leaves the rest alone.
func TestCompileRulesNode(t *testing.T) {
	base, err := compileRules(t, "h100", []int{1, 2}, "")
	require.NoError(t, err)
	other, err := compileRules(t, "b200", []int{1, 2}, "")
	require.NoError(t, err)
	tb, err := compileRules(t, "h100", []int{1, 2}, "[[rule]]\nranks = 8\ncoll = \"allgather\"\nmin_bytes = 1048576\nnode = \"b200\"\n")
	require.NoError(t, err)
	assert.Equal(t, []int{4}, tb.Applied, "1x8 only, 4 pipe-op classes")
	rng := rand.New(rand.NewPCG(9, 10))
	changed := 0
	for _, b := range base.Blocks {
		for c := 0; c < int(costmodel.NumColls); c++ {
			for p := 1; p <= 4; p++ {
				for _, s := range sampleSizes(rng) {
					want := base.Lookup(b.NNodes, b.NRanks, c, p, s)
					if b.NRanks == 8 && c == int(costmodel.AllGather) && s >= 1048576 {
						want = other.Lookup(b.NNodes, b.NRanks, c, p, s)
						if !equalPlans(want, base.Lookup(b.NNodes, b.NRanks, c, p, s)) {
							changed++
						}
					}
					require.Equal(t, want, tb.Lookup(b.NNodes, b.NRanks, c, p, s), "%dx%d coll %d pipe %d size %d", b.NNodes, b.NRanks, c, p, s)
				}
			}
		}
	}
	assert.Positive(t, changed, "b200's table differs from h100's somewhere in the range (else the test proves nothing)")
}

// TestCompileRulesErrors: legality and coverage are checked at compile time.
func TestCompileRulesErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"illegal pin", "[[rule]]\nnodes = 2\n\ncoll = \"allreduce\"\nalgo = \"nvls\"\nproto = \"simple\"\n",
			"r.toml:5: rule 1: algo: NVLS/SIMPLE is not legal for AllReduce at 2 nodes x 16 ranks: multi-node NVLS needs CollNet"},
		{"no block", "[[rule]]\nnodes = 3\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\n",
			"r.toml:3: rule 1: coll: matches no block and class of the table (blocks nNodes x nRanks: 1x8 2x16 1x1 2x2)"},
		{"no pipe-op class", "[[rule]]\ncoll = \"allreduce\"\npipe_ops = 9\nalgo = \"ring\"\nproto = \"ll\"\n",
			"r.toml:2: rule 1: coll: matches no block"},
		{"comm too long", "[[rule]]\ncomm = \"" + strings.Repeat("x", 64) + "\"\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\n",
			"r.toml:2: rule 1: comm: 64 bytes, the table holds at most 63"},
		{"named illegal pin", "[[rule]]\ncomm = \"dp-*\"\nranks = 2\ncoll = \"allreduce\"\nalgo = \"nvls\"\nproto = \"simple\"\n",
			"r.toml:5: rule 1: algo: NVLS/SIMPLE is not legal for AllReduce at 2 nodes x 2 ranks"},
		{"unknown node table", "[[rule]]\ncoll = \"allreduce\"\nnode = \"h900\"\n", "r.toml:3: rule 1: node:"},
		{"node table with fewer GPUs", "[[rule]]\nranks = 16\ncoll = \"allreduce\"\nnode = \"gh200\"\n", "r.toml:4: rule 1: node:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compileRules(t, "h100", []int{1, 2}, tc.text)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestLoadRules(t *testing.T) {
	_, err := LoadRules(filepath.Join(t.TempDir(), "missing.toml"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing.toml")
	p := filepath.Join(t.TempDir(), "r.toml")
	require.NoError(t, os.WriteFile(p, []byte("[[rule]]\ncoll = \"reduce\"\nalgo = \"ring\"\nproto = \"ll\"\n"), 0o644))
	rs, err := LoadRules(p)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	assert.Equal(t, p, rs[0].File)
}

// TestCompileRulesNamed: a rule naming communicators compiles a block of its own per shape it
// selects, reached only through its name; rules naming no communicator apply in it too; the
// section survives Encode and Decode; a bad section is refused.
func TestCompileRulesNamed(t *testing.T) {
	text := `[[rule]]
nodes = 2
coll = "allreduce"
max_bytes = 65535
algo = "ring"
proto = "ll"

[[rule]]
comm = "dp-*"
ranks = 16
coll = "allreduce"
min_bytes = 1024
max_bytes = 1048576
algo = "tree"
proto = "simple"
channels = 2
`
	tb, err := compileRules(t, "h100", []int{1, 2}, text)
	require.NoError(t, err)
	require.Len(t, tb.Blocks, 5, "the grid's four, and dp-* at 2x16")
	require.Equal(t, []Named{{Comm: "dp-*", Block: 4}}, tb.Named)
	assert.Equal(t, [2]int{2, 16}, [2]int{tb.Blocks[4].NNodes, tb.Blocks[4].NRanks})
	ar := int(costmodel.AllReduce)
	tree := Plan{Algo: int(costmodel.Tree), Proto: int(costmodel.Simple), Channels: 2}
	ring := Plan{Algo: int(costmodel.Ring), Proto: int(costmodel.LL)}
	for _, tc := range []struct {
		comm   string
		size   int64
		first  Plan
		reason string
	}{
		{"dp-0", 4096, tree, "both rules cover it: the named one first (file order: the unnamed rule first)"},
		{"dp-0", 500, ring, "below the named rule's range: the unnamed rule"},
		{"dp-0", 1 << 19, tree, "the named rule alone"},
		{"tp-0", 4096, ring, "no pattern matches: the shape's block"},
		{"", 4096, ring, "no name: the shape's block"},
	} {
		got := tb.LookupComm(tc.comm, 2, 16, ar, 1, tc.size)
		require.NotEmpty(t, got, tc.reason)
		if tc.comm == "dp-0" && tc.size == 4096 {
			// Both rules: the unnamed pin comes first in the file, so it leads, then the named one.
			assert.Equal(t, []Plan{ring, tree}, got[:2], tc.reason)
			continue
		}
		assert.Equal(t, tc.first, got[0], "%s at %d: %s", tc.comm, tc.size, tc.reason)
	}
	assert.Equal(t, tb.Lookup(2, 2, ar, 1, 1<<19), tb.LookupComm("dp-0", 2, 2, ar, 1, 1<<19), "dp-* has no 2x2 block")

	data, err := tb.Encode()
	require.NoError(t, err)
	back, err := Decode(data)
	require.NoError(t, err)
	assert.Equal(t, tb.Named, back.Named)
	assert.Equal(t, tb.LookupComm("dp-3", 2, 16, ar, 2, 1<<19), back.LookupComm("dp-3", 2, 16, ar, 2, 1<<19))

	// The section sits right after the block directory: count, reserved, then 72-byte entries.
	sec := headerBytes + blockBytes*len(tb.Blocks)
	for _, tc := range []struct {
		name string
		edit func(d []byte)
		want string
	}{
		{"block out of range", func(d []byte) { le.PutUint32(d[sec+8+64:], 5) }, "block 5 of 5"},
		{"unterminated", func(d []byte) { copy(d[sec+8:sec+8+64], strings.Repeat("x", 64)) }, "unterminated pattern"},
		{"empty", func(d []byte) { d[sec+8] = 0 }, "empty or unterminated"},
		{"no entries", func(d []byte) { le.PutUint32(d[sec:], 0) }, "0 entries"},
		{"unknown flag", func(d []byte) { le.PutUint32(d[40:], 8|flagNamed) }, "unknown flags"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := append([]byte{}, data...)
			tc.edit(d)
			le.PutUint64(d[24:], Checksum(d))
			_, err := Decode(d)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestReleaseRecord: the release a table was priced with survives Encode and Decode (master too),
// sits after the named section, and a record naming a release collplan does not model is refused.
func TestReleaseRecord(t *testing.T) {
	for _, rel := range []costmodel.Release{{Major: 2, Minor: 19, Patch: 3}, {Major: 2, Minor: 30, Patch: 7, Master: true}} {
		tb, err := compileRules(t, "h100", []int{1}, "[[rule]]\ncomm = \"x\"\nranks = 8\ncoll = \"reduce\"\nalgo = \"ring\"\nproto = \"simple\"\n")
		require.NoError(t, err)
		tb.Release = rel
		data, err := tb.Encode()
		require.NoError(t, err)
		back, err := Decode(data)
		require.NoError(t, err)
		assert.Equal(t, rel, back.Release)
		assert.Equal(t, tb.Named, back.Named)
		rec := headerBytes + blockBytes*len(tb.Blocks) + 8 + namedBytes*len(tb.Named)
		assert.Equal(t, uint32(rel.Major<<16|rel.Minor<<8|rel.Patch), le.Uint32(data[rec:])&0x7FFFFFFF)
		le.PutUint32(data[rec:], 2<<16|18<<8)
		le.PutUint64(data[24:], Checksum(data))
		_, err = Decode(data)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "release record")
	}
}
