package rules_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin/policy/rules"
	"github.com/collplan/collplan/tables"
)

func h100(t *testing.T, nodes int) *capabilities.Topology {
	t.Helper()
	n, err := tables.Load("h100")
	require.NoError(t, err)
	topo, err := capabilities.FromNode(n, nodes)
	require.NoError(t, err)
	return &topo
}

func request(t *testing.T, topo *capabilities.Topology, cls planner.Class) *planner.Request {
	t.Helper()
	pl, err := planner.New(topo, planner.Config{})
	require.NoError(t, err)
	m, err := pl.Menu(cls)
	require.NoError(t, err)
	return &planner.Request{Topology: topo, Class: cls, Menu: m}
}

func allReduce() planner.Class {
	return planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
}

// TestParseExamples parses every form of the NCCL example format.
func TestParseExamples(t *testing.T) {
	p, err := rules.Load("testdata/nccl_tuner.conf")
	require.NoError(t, err)
	require.Len(t, p.Rules, 13)
	tree, ring := planner.Cell{Algo: costmodel.Tree, Proto: costmodel.Simple}, planner.Cell{Algo: costmodel.Ring, Proto: costmodel.LL128}
	assert.Equal(t, rules.Rule{Line: 6, Coll: costmodel.AllReduce, Min: 0, Max: 65536, Cell: tree, Channels: 2,
		NNodes: 1, NRanks: -1, PipeOps: -1, RegBuff: 1}, p.Rules[0])
	assert.Equal(t, rules.Rule{Line: 8, Coll: costmodel.AllGather, Min: 65537, Max: 4294967295, Cell: ring,
		NNodes: -1, NRanks: -1, PipeOps: -1, RegBuff: -1}, p.Rules[1], "8 fields: numPipeOps and regBuff match any")
	assert.Equal(t, 1, p.Rules[2].PipeOps, "9 fields")
	assert.Equal(t, -1, p.Rules[2].RegBuff, "9 fields")
	assert.Equal(t, uint64(math.MaxUint64), p.Rules[4].Max)
	assert.Equal(t, uint64(17179869184), p.Rules[5].Max, "sizes past 4 GiB")
	assert.Equal(t, planner.Cell{Algo: costmodel.NVLSTree, Proto: costmodel.Simple}, p.Rules[5].Cell)
	algos := []costmodel.Algo{costmodel.CollNetDirect, costmodel.CollNetChain, costmodel.PAT, costmodel.NVLS}
	for i, a := range algos {
		assert.Equal(t, a, p.Rules[6+i].Cell.Algo)
	}
	assert.Equal(t, 0, p.Rules[10].Channels, "channels 0 keeps the planner's")
	assert.Equal(t, rules.Rule{Line: 22, Coll: costmodel.AllReduce, Min: 262144, Max: 1048576,
		Cell: planner.Cell{Algo: costmodel.Tree, Proto: costmodel.LL128}, Channels: 4, NNodes: -1, NRanks: -1,
		PipeOps: -1, RegBuff: -1}, p.Rules[11], "blanks and tabs around fields")
	assert.Equal(t, 64, p.Rules[12].Channels)
	assert.Equal(t, 0, p.Rules[12].RegBuff)
}

// TestParseRejectsWithLineNumbers reports every bad line by number.
func TestParseRejectsWithLineNumbers(t *testing.T) {
	_, err := rules.Load("testdata/bad.conf")
	var pe *rules.ParseError
	require.True(t, errors.As(err, &pe), "%v", err)
	var lines []int
	for _, l := range pe.Lines {
		lines = append(lines, l.Line)
		assert.Equal(t, "testdata/bad.conf", l.File)
	}
	assert.Equal(t, []int{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 21}, lines)
	for _, want := range []string{"bad.conf:2: 7 fields", "bad.conf:4: field 1 (collective) \"alltoall\"",
		"bad.conf:6: field 3 (maxbytes)", "bad.conf:7: field 3 (maxbytes) \"0\": below minbytes 65536",
		"bad.conf:10: field 6 (channels) \"65\"", "bad.conf:15: field 2 (minbytes) is empty"} {
		assert.Contains(t, strings.Join(pe.Details(), "\n"), want)
	}
	assert.Contains(t, err.Error(), "; and 12 more bad lines", "the message stays short")
}

func TestParseSmall(t *testing.T) {
	for _, tc := range []struct {
		name, line, err string
	}{
		{"ok", "allreduce,0,1,ring,ll,-1,-1,-1", ""},
		{"nccl algo names", "allreduce,0,1,NVLSTree,Simple,-1,-1,-1", ""},
		{"empty file", "", ""},
		{"comment", "  # nothing", ""},
		{"crlf", "allreduce,0,1,ring,ll,-1,-1,-1\r", ""},
		{"negative nodes", "allreduce,0,1,ring,ll,-1,-3,-1", "field 7 (nNodes)"},
		{"long line", "allreduce,0,1,ring,ll,-1,-1," + string(make([]byte, 300)), "field 8 (nRanks)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rules.Parse("x.conf", []byte(tc.line))
			if tc.err == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tc.err)
			}
		})
	}
}

// TestTune checks first-match-wins, the filters, the illegal-cell skip and inclusive bounds.
func TestTune(t *testing.T) {
	conf := `
allreduce,0,100,nvls,simple,-1,-1,-1
allreduce,0,1023,tree,simple,-1,-1,-1
allreduce,512,8191,ring,ll,8,-1,-1
allreduce,100000,200000,ring,simple,-1,1,-1
allreduce,100000,200000,ring,ll128,-1,2,16,1,0
allreduce,100000,300000,ring,simple,-1,2,16,2
allreduce,5000000000,18446744073709551615,tree,ll128,32,-1,-1
allgather,0,18446744073709551615,ring,ll,-1,-1,-1
`
	p, err := rules.Parse("t.conf", []byte(conf))
	require.NoError(t, err)
	force := func(a costmodel.Algo, pr costmodel.Proto) planner.Edit {
		return planner.Edit{Kind: planner.Force, Cell: planner.Cell{Algo: a, Proto: pr}}
	}
	ch := func(n float64) planner.Edit { return planner.Edit{Kind: planner.Channels, Value: n} }
	// h100 x2: NVLS is not legal (multi-node without CollNet), 16 ranks, 2 nodes.
	ivs, err := p.Tune(context.Background(), request(t, h100(t, 2), allReduce()))
	require.NoError(t, err)
	assert.Equal(t, []planner.Interval{
		{Lo: 0, Hi: 1024, Edits: []planner.Edit{force(costmodel.Tree, costmodel.Simple)}},
		{Lo: 1024, Hi: 8192, Edits: []planner.Edit{force(costmodel.Ring, costmodel.LL), ch(8)}},
		{Lo: 100000, Hi: 200001, Edits: []planner.Edit{force(costmodel.Ring, costmodel.LL128)}},
		{Lo: 5000000000, Hi: math.MaxInt64, Edits: []planner.Edit{force(costmodel.Tree, costmodel.LL128), ch(32)}},
	}, ivs)

	// Registered buffers and 2 pipe ops: rule 5 no longer matches, rule 6 does.
	cls := allReduce()
	cls.RegBuff, cls.PipeOps = true, 2
	ivs, err = p.Tune(context.Background(), request(t, h100(t, 2), cls))
	require.NoError(t, err)
	require.Len(t, ivs, 4)
	assert.Equal(t, planner.Interval{Lo: 100000, Hi: 300001, Edits: []planner.Edit{force(costmodel.Ring, costmodel.Simple)}}, ivs[2])

	// One node: NVLS is legal (the first rule wins up to 100 bytes), and the nNodes 1 rule matches.
	ivs, err = p.Tune(context.Background(), request(t, h100(t, 1), allReduce()))
	require.NoError(t, err)
	assert.Equal(t, planner.Interval{Lo: 0, Hi: 101, Edits: []planner.Edit{force(costmodel.NVLS, costmodel.Simple)}}, ivs[0])
	assert.Equal(t, planner.Interval{Lo: 101, Hi: 1024, Edits: []planner.Edit{force(costmodel.Tree, costmodel.Simple)}}, ivs[1])
	assert.Equal(t, planner.Interval{Lo: 100000, Hi: 200001, Edits: []planner.Edit{force(costmodel.Ring, costmodel.Simple)}}, ivs[3])
}

// TestDecisions runs the policy in process as the planner's tuner: the forced cells and channel
// counts are the decisions, past 4 GiB too.
func TestDecisions(t *testing.T) {
	p, err := rules.Parse("t.conf", []byte("allreduce,0,65536,ring,ll,4,-1,-1\nallreduce,4294967296,18446744073709551615,tree,simple,-1,-1,-1\n"))
	require.NoError(t, err)
	pl, err := planner.New(h100(t, 2), planner.Config{Tuner: p})
	require.NoError(t, err)
	dt, err := pl.Compile(context.Background(), allReduce())
	require.NoError(t, err)
	assert.Empty(t, dt.TunerNote)
	for _, n := range []int64{0, 1, 4096, 65536} {
		d := dt.Lookup(n)
		assert.Equal(t, costmodel.Ring, d.Algo, n)
		assert.Equal(t, costmodel.LL, d.Proto, n)
		assert.Equal(t, 4, d.Channels, n)
	}
	for _, n := range []int64{4 << 30, 8 << 30, 1 << 40} {
		d := dt.Lookup(n)
		assert.Equal(t, planner.Cell{Algo: costmodel.Tree, Proto: costmodel.Simple}, planner.Cell{Algo: d.Algo, Proto: d.Proto}, n)
	}
	d := dt.Lookup(4<<30 - 1)
	assert.NotEqual(t, planner.Cell{Algo: costmodel.Tree, Proto: costmodel.Simple}, planner.Cell{Algo: d.Algo, Proto: d.Proto},
		"the built-in pick just below the rule")
}
