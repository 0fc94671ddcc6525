package plugin_test

// Tests of the shim's exploration (COLLPLAN_EXPLORE, issue 17 item 3). The expected decision of
// every call comes from exploreOracle, a reimplementation of the rule the README states, driven
// call by call beside the sequence it writes for the C harness; the harness checks each call of
// the library against it.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/plugin/shimtable"
)

// exploreOracle: with P = round(1 / fraction), the call whose band counter c (earlier calls of the
// same block, collective, numPipeOps and size interval) has c % P == P - 1 takes runner-up
// 1 + (c / P) % (R - 1) among the R ranked plans legal in the call's cost table; any other call, or
// R < 2, takes the first legal one. fraction 0, or a period of 2^32 or more: never explores. (The
// shim's band counter wraps after 2^32 explorations of one band, which no test reaches.)
type exploreOracle struct {
	tb       *shimtable.Table
	period   int64
	bands    map[[5]int]int64 // nNodes, nRanks, coll, pipeOps, interval -> calls seen
	calls    map[[4]int]int64 // nNodes, nRanks, coll, pipeOps -> calls
	explored map[[4]int]int64 // the same -> explored calls
}

func newExploreOracle(tb *shimtable.Table, fraction float64) *exploreOracle {
	o := &exploreOracle{tb: tb, bands: map[[5]int]int64{}, calls: map[[4]int]int64{}, explored: map[[4]int]int64{}}
	if fraction > 0 {
		o.period = int64(math.Round(1 / fraction))
	}
	if o.period >= 1<<32 { // a period of 2^32 calls or more explores nothing
		o.period = 0
	}
	return o
}

// class returns the call's class, or nil when the shim passes the call through.
func (o *exploreOracle) class(nNodes, nRanks, coll, pipeOps int) *shimtable.Class {
	for i := range o.tb.Blocks {
		b := &o.tb.Blocks[i]
		if b.NNodes != nNodes || b.NRanks != nRanks {
			continue
		}
		if coll < 0 || coll >= 5 || pipeOps < b.MinPipeOps || pipeOps > b.MaxPipeOps {
			return nil
		}
		return &b.Classes[coll][pipeOps-b.MinPipeOps]
	}
	return nil
}

// decide returns the cell the call must force (-1: none), its nChannels override and whether the
// call explored.
func (o *exploreOracle) decide(nNodes, nRanks, coll, pipeOps int, nBytes int64, costs []float32, sh shape) (cell, channels int, explored bool) {
	cl := o.class(nNodes, nRanks, coll, pipeOps)
	if cl == nil {
		return -1, 0, false
	}
	j := sort.Search(len(cl.Starts), func(i int) bool { return cl.Starts[i] > nBytes }) - 1
	var legal []shimtable.Plan
	for _, p := range cl.Plans[j] {
		if p.Algo < sh.numAlgo && p.Proto < sh.numProto && costs[p.Algo*sh.numProto+p.Proto] >= 0 {
			legal = append(legal, p)
		}
	}
	pick := 0
	if o.period > 0 {
		key := [5]int{nNodes, nRanks, coll, pipeOps, j}
		c := o.bands[key]
		o.bands[key]++
		ck := [4]int{nNodes, nRanks, coll, pipeOps}
		o.calls[ck]++
		if len(legal) >= 2 && c%o.period == o.period-1 {
			pick = 1 + int((c/o.period)%int64(len(legal)-1))
			o.explored[ck]++
		}
	}
	if len(legal) == 0 {
		return -1, 0, false
	}
	p := legal[pick]
	return p.Algo*sh.numProto + p.Proto, p.Channels, pick > 0
}

// exploreCall is one call of a generated sequence and its expected outcome.
type exploreCall struct {
	nNodes, nRanks, coll, pipeOps int
	nBytes                        int64
	sh                            shape
	costs                         []float32
	cell, channels                int
	explored                      bool
}

func (c exploreCall) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "c %d %d %d %d %d %d %d", c.nNodes, c.nRanks, c.coll, c.pipeOps, c.nBytes, c.sh.numAlgo, c.sh.numProto)
	for _, v := range c.costs {
		b.WriteString(" " + f32(v))
	}
	fmt.Fprintf(&b, " %d %d", c.cell, c.channels)
	return b.String()
}

// band is one (block, collective, numPipeOps, interval) a sequence draws calls from.
type band struct {
	nNodes, nRanks, coll, pipeOps int
	lo, hi                        int64 // sizes of the interval: [lo, hi]
}

// pickBands chooses up to n bands of tb with at least minPlans ranked plans, from at most
// maxClasses classes (the harness checks a bounded number of log lines).
func pickBands(rng *rand.Rand, tb *shimtable.Table, n, minPlans, maxClasses int) []band {
	var all []band
	for _, b := range tb.Blocks {
		for coll := range 5 {
			for p := b.MinPipeOps; p <= b.MaxPipeOps; p++ {
				cl := b.Classes[coll][p-b.MinPipeOps]
				for j := range cl.Starts {
					if len(cl.Plans[j]) < minPlans {
						continue
					}
					hi := int64(math.MaxInt64)
					if j+1 < len(cl.Starts) {
						hi = cl.Starts[j+1] - 1
					}
					all = append(all, band{b.NNodes, b.NRanks, coll, p, cl.Starts[j], min(hi, cl.Starts[j]+1<<40)})
				}
			}
		}
	}
	rng.Shuffle(len(all), func(a, b int) { all[a], all[b] = all[b], all[a] })
	classes := map[[4]int]bool{}
	var out []band
	for _, bd := range all {
		k := [4]int{bd.nNodes, bd.nRanks, bd.coll, bd.pipeOps}
		if !classes[k] && len(classes) >= maxClasses {
			continue
		}
		classes[k] = true
		out = append(out, bd)
		if len(out) == n {
			break
		}
	}
	return out
}

// exploreSequence draws n calls from the bands, interleaved at random, sizes anywhere in each
// band's interval; ignoreShare of them get a cost table with IGNORE cells (costTable's patterns)
// or a smaller NCCL table, and one in 16 is a call the shim passes through (numPipeOps outside
// the block), which must not move any counter.
func exploreSequence(rng *rand.Rand, o *exploreOracle, bands []band, n int, ignoreShare float64) []exploreCall {
	var out []exploreCall
	for i := range n {
		bd := bands[rng.IntN(len(bands))]
		c := exploreCall{nNodes: bd.nNodes, nRanks: bd.nRanks, coll: bd.coll, pipeOps: bd.pipeOps, sh: shapes[0]}
		if i%16 == 15 {
			c.pipeOps = 1000
		}
		c.nBytes = bd.lo + rng.Int64N(bd.hi-bd.lo+1)
		plans := o.tb.Lookup(c.nNodes, c.nRanks, c.coll, bd.pipeOps, c.nBytes)
		if rng.Float64() < ignoreShare {
			if rng.IntN(3) == 0 {
				c.sh = shapes[rng.IntN(len(shapes))]
			}
			c.costs = costTable(rng, c.sh, plans, rng.IntN(5))
		} else {
			c.costs = costTable(rng, c.sh, plans, 5)
		}
		c.cell, c.channels, c.explored = o.decide(c.nNodes, c.nRanks, c.coll, c.pipeOps, c.nBytes, c.costs, c.sh)
		out = append(out, c)
	}
	return out
}

// exploreCases renders a sequence for the harness, with the counts the shim logs at each
// finalize: per class "explored <coll> numPipeOps <p>: E of N calls" and per communicator the
// totals, each expected once per ABI and rank.
func exploreCases(o *exploreOracle, seq []exploreCall, abis []int, ranks int) *cases {
	cs := &cases{}
	cs.directive("abis %s", strings.Trim(fmt.Sprint(abis), "[]"))
	if o.tb.Constants != nil { // v5+ init on a matched communicator writes the table's constants
		var b strings.Builder
		b.WriteString("constants")
		for _, v := range o.tb.Constants {
			b.WriteString(" " + strconv.FormatFloat(v, 'g', -1, 64))
		}
		cs.head = append(cs.head, b.String())
	}
	comms := map[[2]int]bool{}
	for _, c := range seq {
		comms[[2]int{c.nNodes, c.nRanks}] = true
		cs.lines = append(cs.lines, c.line())
	}
	for _, b := range o.tb.Blocks {
		if comms[[2]int{b.NNodes, b.NRanks}] {
			cs.directive("comm %d %d %d %d %d 1", b.NNodes, b.NRanks, b.NVLDomains, b.MinRanksPerNVL, b.MaxRanksPerNVL)
		}
	}
	if o.period == 0 {
		cs.directive("expect-count 0 collplan: explored")
		return cs
	}
	collNames := []string{"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"}
	want := map[string]int{}
	totals := map[[2]int][2]int64{}
	for k, n := range o.calls {
		want[fmt.Sprintf("collplan: explored %s numPipeOps %d: %d of %d calls", collNames[k[2]], k[3], o.explored[k], n)]++
		t := totals[[2]int{k[0], k[1]}]
		totals[[2]int{k[0], k[1]}] = [2]int64{t[0] + o.explored[k], t[1] + n}
	}
	for _, t := range totals {
		want[fmt.Sprintf("collplan: explored %d of %d calls in all (COLLPLAN_EXPLORE=", t[0], t[1])]++
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		cs.directive("expect-count %d %s", want[k]*len(abis)*ranks, k)
	}
	return cs
}

// exploreTables: the h100 table as `planner compile` writes it (K = 4), and the hand-made K = 8
// table (random plans, channel overrides, intervals with fewer than K plans or none).
func exploreTables(t *testing.T) []struct {
	name string
	tb   *shimtable.Table
} {
	return []struct {
		name string
		tb   *shimtable.Table
	}{
		{"h100", compiled(t, "h100", []int{1, 2})},
		{"handmade", handMade(rand.New(rand.NewPCG(3, 3)))},
	}
}

// TestShimExploreOracle checks the oracle itself by hand: in one band whose 4 ranked plans are all
// legal, calls 19, 39, 59, 79, 99 (0-based) of 0.05 explore, taking runner-ups 1, 2, 3, 1, 2;
// with the first plan IGNORE the legal list shifts; with one legal plan nothing explores.
func TestShimExploreOracle(t *testing.T) {
	plans := []shimtable.Plan{{Algo: 1, Proto: 2}, {Algo: 0, Proto: 2, Channels: 8}, {Algo: 1, Proto: 1}, {Algo: 0, Proto: 0}}
	tb := &shimtable.Table{K: 4, Blocks: []shimtable.Block{{NNodes: 1, NRanks: 8, MinPipeOps: 1, MaxPipeOps: 1,
		Classes: [][]shimtable.Class{{{Starts: []int64{0}, Plans: [][]shimtable.Plan{plans}}}, {{Starts: []int64{0}, Plans: [][]shimtable.Plan{nil}}},
			{{Starts: []int64{0}, Plans: [][]shimtable.Plan{nil}}}, {{Starts: []int64{0}, Plans: [][]shimtable.Plan{nil}}},
			{{Starts: []int64{0}, Plans: [][]shimtable.Plan{nil}}}}}}}
	all := make([]float32, 21)
	cell := func(a, p int) int { return a*3 + p }
	o := newExploreOracle(tb, 0.05)
	var explored []int
	for c := range 100 {
		got, ch, ex := o.decide(1, 8, 0, 1, 4096, all, shape{7, 3})
		want := cell(1, 2)
		switch c {
		case 19, 79:
			want = cell(0, 2)
			assert.Equal(t, 8, ch, "call %d channels", c)
		case 39, 99:
			want = cell(1, 1)
		case 59:
			want = cell(0, 0)
		}
		assert.Equal(t, want, got, "call %d", c)
		if ex {
			explored = append(explored, c)
		}
	}
	assert.Equal(t, []int{19, 39, 59, 79, 99}, explored, "exactly 1 in 20")
	ign := slices.Clone(all)
	ign[cell(1, 2)] = -1 // the pick IGNORE: legal = plans[1:], runner-up 1 is plans[2]
	o = newExploreOracle(tb, 0.05)
	for c := range 20 {
		got, _, _ := o.decide(1, 8, 0, 1, 1, ign, shape{7, 3})
		assert.Equal(t, map[bool]int{false: cell(0, 2), true: cell(1, 1)}[c == 19], got, "IGNORE pick, call %d", c)
	}
	one := slices.Clone(all)
	one[cell(0, 2)], one[cell(1, 1)], one[cell(0, 0)] = -1, -1024, -1
	o = newExploreOracle(tb, 0.05)
	for c := range 40 {
		got, _, ex := o.decide(1, 8, 0, 1, 1, one, shape{7, 3})
		assert.Equal(t, cell(1, 2), got, "one legal plan, call %d", c)
		assert.False(t, ex)
	}
	assert.Equal(t, int64(3), newExploreOracle(tb, 0.3).period, "round(1/0.3)")
	assert.Equal(t, int64(33), newExploreOracle(tb, 0.03).period, "round(1/0.03)")
}

// TestShimExplore drives the library with interleaved sequences over both tables: off (unset, 0,
// and 1e-10, a period past 2^32) every call takes the table's pick; at 0.05, 0.04 and 0.03 each call takes the oracle's
// decision, exactly one in P calls per band explores (the finalize counts), never an IGNORE cell
// (the harness checks each forced cell); three "ranks" fed the same sequence force the same cell
// call by call through ABIs v3..v6 (at 0.05 also under ASan/UBSan); and under NCCL_DEBUG=TRACE
// one TRACE line per explored call says so.
func TestShimExplore(t *testing.T) {
	b := shim(t)
	start := time.Now()
	for ti, tc := range exploreTables(t) {
		table := writeFile(t, tc.name+".cpln", encode(t, tc.tb))
		for fi, f := range []struct {
			env      string
			fraction float64
		}{{"", 0}, {"0", 0}, {"1e-10", 1e-10}, {"0.05", 0.05}, {"0.04", 0.04}, {"0.03", 0.03}} {
			t.Run(fmt.Sprintf("%s/%q", tc.name, f.env), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ti), uint64(fi)))
				bands := pickBands(rng, tc.tb, 10, 3, 5)
				require.NotEmpty(t, bands)
				o := newExploreOracle(tc.tb, f.fraction)
				seq := exploreSequence(rng, o, bands, 2400, 0.3)
				nExplored := 0
				for _, c := range seq {
					if c.explored {
						nExplored++
					}
				}
				off := newExploreOracle(tc.tb, 0)
				picks := 0
				for _, c := range seq {
					cell, _, _ := off.decide(c.nNodes, c.nRanks, c.coll, c.pipeOps, c.nBytes, c.costs, c.sh)
					if cell == c.cell {
						picks++
					}
				}
				assert.Equal(t, len(seq)-nExplored, picks, "only explored calls differ from the table's pick")
				if o.period > 0 {
					assert.Positive(t, nExplored, "the sequence explores")
				} else {
					assert.Zero(t, nExplored)
				}
				env := cleanEnv("COLLPLAN_TUNER_TABLE=" + table)
				if f.env != "" {
					env = append(env, "COLLPLAN_EXPLORE="+f.env)
				}
				file := exploreCases(o, seq, []int{3, 4, 5, 6}, 3).write(t, "ranks.cases", 1)
				out := run(t, env, b.harness, "ranks", b.so, file, "3")
				t.Logf("%d calls, %d explored: %s", len(seq), nExplored, strings.TrimSpace(out))
				if f.fraction != 0.05 {
					return
				}
				// The address and undefined-behaviour sanitizers on the same run.
				run(t, env, b.asanHarness, "ranks", b.asanSo, file, "3")
				// The same sequence in cases mode under TRACE (one ABI: the harness keeps 4,096 messages).
				cs := exploreCases(o, seq, []int{6}, 1)
				cs.directive("expect-count %d exploring (COLLPLAN_EXPLORE)", nExplored)
				run(t, append(env, "NCCL_DEBUG=TRACE"), b.harness, "cases", b.so, cs.write(t, "trace.cases", 1))
			})
		}
	}
	t.Logf("explore runs took %v", time.Since(start).Round(100*time.Millisecond))
}

// TestShimExploreBadValues: a COLLPLAN_EXPLORE above 0.05, below 0 or not a number fails every
// init with ncclInvalidUsage (5), leaves no context, and says on stderr which variable and limit;
// also when no table is set (the setting is wrong whatever the table).
func TestShimExploreBadValues(t *testing.T) {
	b := shim(t)
	tb := compiled(t, "h100", []int{1})
	table := writeFile(t, "h100.cpln", encode(t, tb))
	rng := rand.New(rand.NewPCG(9, 9))
	o := newExploreOracle(tb, 0)
	seq := exploreSequence(rng, o, pickBands(rng, tb, 4, 1, 4), 40, 0)
	cs := exploreCases(o, seq, []int{3, 4, 5, 6}, 1)
	cs.head = slices.DeleteFunc(cs.head, func(l string) bool { return strings.HasPrefix(l, "expect-count") })
	cs.directive("init-fails 5")
	cs.directive("expect-log COLLPLAN_EXPLORE=")
	file := cs.write(t, "bad.cases", 1)
	for _, v := range []string{"0.06", "0.0500001", "1", "-0.01", "-0", "abc", "0.01x", "nan", "inf", "1e999", " "} {
		for _, withTable := range []bool{true, false} {
			t.Run(fmt.Sprintf("%q/table=%v", v, withTable), func(t *testing.T) {
				env := cleanEnv("COLLPLAN_EXPLORE=" + v)
				if withTable {
					env = append(env, "COLLPLAN_TUNER_TABLE="+table)
				}
				if v == "-0" && !withTable {
					t.Skip("-0 is 0 (off): checked with the table")
				}
				if v == "-0" {
					// -0 is 0 (off): init succeeds, every call takes the table's pick.
					ok := exploreCases(o, seq, []int{6}, 1)
					run(t, env, b.harness, "cases", b.so, ok.write(t, "ok.cases", 1))
					return
				}
				out := run(t, env, b.harness, "cases", b.so, file)
				assert.Contains(t, out, fmt.Sprintf("collplan: COLLPLAN_EXPLORE=%q is not a fraction between 0 and 0.05", v))
			})
		}
	}
}

// TestShimExploreValgrind: the three-rank run at 0.05 and a refused value, under valgrind.
func TestShimExploreValgrind(t *testing.T) {
	b := shim(t)
	tb := handMade(rand.New(rand.NewPCG(3, 3)))
	table := writeFile(t, "hand.cpln", encode(t, tb))
	rng := rand.New(rand.NewPCG(11, 11))
	o := newExploreOracle(tb, 0.05)
	seq := exploreSequence(rng, o, pickBands(rng, tb, 8, 3, 5), 600, 0.3)
	env := cleanEnv("COLLPLAN_TUNER_TABLE="+table, "COLLPLAN_EXPLORE=0.05")
	logValgrind(t, "ranks", run(t, env, append(valgrindArgs, b.harness, "ranks", b.so,
		exploreCases(o, seq, []int{5, 6}, 3).write(t, "ranks.cases", 1), "3")...))
	bad := exploreCases(newExploreOracle(tb, 0), seq[:40], []int{6}, 1)
	bad.head = slices.DeleteFunc(bad.head, func(l string) bool { return strings.HasPrefix(l, "expect-count") })
	bad.directive("init-fails 5")
	logValgrind(t, "refused", run(t, cleanEnv("COLLPLAN_TUNER_TABLE="+table, "COLLPLAN_EXPLORE=0.5"),
		append(valgrindArgs, b.harness, "cases", b.so, bad.write(t, "bad.cases", 1))...))
}
