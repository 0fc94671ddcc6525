package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func showJSON(t *testing.T, args ...string) shownLog {
	t.Helper()
	out, err := runCLI(t, "", append([]string{"show-decisions", "--json"}, args...)...)
	require.NoError(t, err)
	var l shownLog
	require.NoError(t, json.Unmarshal([]byte(out), &l), out)
	return l
}

// TestShowDecisionsTaggedLog reads NCCL 2.30's TUNING lines of an 8-GPU H100 job (mpirun-tagged,
// one line split by another rank's output, one malformed, one symmetric-kernel line): the rows
// are the log's decisions as listed here by hand, AllGather's size is the model's x 8 ranks, the
// planner (which reproduces NCCL 2.30) agrees with every call, and each row's model time is what
// planner explain says at that size.
func TestShowDecisionsTaggedLog(t *testing.T) {
	l := showJSON(t, "--log", "../../calibrate/testdata/tuning/tuning_2.30_h100_tagged.log", "--node", "h100")
	type row struct {
		coll        string
		bytes, n    int64
		calls       int
		algo, proto string
		lo, hi      int
	}
	want := []row{
		{"AllGather", 8192, 8 * 8192, 1, "RING", "LL", 0, 1},
		{"AllGather", 8388608, 8 * 8388608, 1, "RING", "SIMPLE", 0, 31},
		{"AllReduce", 8, 8, 2, "RING", "LL", 0, 0},
		{"AllReduce", 4096, 4096, 1, "RING", "LL", 0, 0},
		{"AllReduce", 65536, 65536, 1, "RING", "LL", 0, 1},
		{"AllReduce", 1048576, 1048576, 1, "RING", "LL", 0, 23},
		{"AllReduce", 2097152, 2097152, 1, "NVLS", "SIMPLE", 0, 15},
		{"AllReduce", 67108864, 67108864, 1, "NVLS", "SIMPLE", 0, 15},
	}
	require.Len(t, l.Rows, len(want))
	for i, w := range want {
		r := l.Rows[i]
		assert.Equal(t, w.coll, r.Coll, "row %d", i)
		assert.Equal(t, w.bytes, r.Bytes, "row %d", i)
		assert.Equal(t, w.n, r.ModelBytes, "row %d", i)
		assert.Equal(t, w.calls, r.Calls, "row %d", i)
		assert.Equal(t, w.algo+"/"+w.proto, r.NCCLAlgo+"/"+r.NCCLProto, "row %d", i)
		require.NotNil(t, r.ChannelLo, "row %d", i)
		assert.Equal(t, [2]int{w.lo, w.hi}, [2]int{*r.ChannelLo, *r.ChannelHi}, "row %d", i)
		assert.Nil(t, r.NCCLTimeUS, "the 2.24+ format prints no time")
		assert.True(t, r.Agree, "row %d: collplan picks %s/%s", i, r.PickAlgo, r.PickProto)
		m := explainJSON(t, "--node", "h100", "--coll", strings.ToLower(w.coll), "--bytes", strconv.FormatInt(w.n, 10))
		assert.Equal(t, m["time_us"], float64(r.PickUS), "row %d", i)
		assert.Equal(t, r.PickUS, r.NCCLCellUS, "row %d: the same cell", i)
	}
	assert.Equal(t, 9, l.Calls)
	assert.Equal(t, 9, l.Agree)
	assert.Equal(t, "rank 0", l.Process)
	require.Len(t, l.Skipped, 1)
	assert.Equal(t, 44, l.Skipped[0].Line)
	assert.Contains(t, l.Skipped[0].Reason, "unreadable")
}

// TestShowDecisionsRanksAndSkips: with several ranks in one log the lowest rank's decisions are
// shown (every rank logs the same ones), even when another rank logged first; calls repeat;
// a SendRecv line and a line without a collective are skipped, naming their lines, unless --coll
// names the collective of the collective-less lines; NCCL's cell that the model finds illegal is
// noted. Text output: the header, a row per size, the agreement line.
func TestShowDecisionsRanksAndSkips(t *testing.T) {
	log := strings.Join([]string{
		"[1,1]<stdout>:host-a:101:111 [1] NCCL INFO AllReduce: 8 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..0}",
		"[1,0]<stdout>:host-a:100:110 [0] NCCL INFO AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}",
		"[1,0]<stdout>:host-a:100:110 [0] NCCL INFO AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}",
		"[1,0]<stdout>:host-a:100:110 [0] NCCL INFO AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}",
		"[1,0]<stdout>:host-a:100:110 [0] NCCL INFO SendRecv: 4096 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..0}",
		"[1,0]<stdout>:host-a:100:110 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo TREE proto SIMPLE channel{Lo..Hi}={0..1}",
		"[1,0]<stdout>:host-a:100:110 [0] NCCL INFO AllReduce: 4194304 Bytes -> Algo COLLNET_DIRECT proto SIMPLE channel{Lo..Hi}={0..1}",
		"",
	}, "\n")
	file := filepath.Join(t.TempDir(), "two-ranks.log")
	require.NoError(t, os.WriteFile(file, []byte(log), 0o600))
	l := showJSON(t, "--log", file, "--node", "h100")
	assert.Equal(t, "rank 0", l.Process)
	assert.Equal(t, 2, l.Processes)
	require.Len(t, l.Rows, 3)
	assert.Equal(t, 3, l.Rows[0].Calls, "rank 0's three 8-byte calls; rank 1's line is not counted")
	assert.Equal(t, "RING", l.Rows[0].NCCLAlgo)
	assert.True(t, l.Rows[0].Agree)
	// 1 MiB AllReduce on one H100 node: NCCL 2.30 picks Ring/LL (reference §13), not Tree/Simple.
	assert.False(t, l.Rows[1].Agree)
	assert.Equal(t, "RING/LL", l.Rows[1].PickAlgo+"/"+l.Rows[1].PickProto)
	assert.Greater(t, float64(l.Rows[1].NCCLCellUS), float64(l.Rows[1].PickUS))
	assert.Contains(t, l.Rows[2].Note, "not legal in collplan's model", "CollNet on a node without CollNet")
	assert.Equal(t, 5, l.Calls)
	assert.Equal(t, 3, l.Agree)
	require.Len(t, l.Skipped, 1)
	assert.Equal(t, 5, l.Skipped[0].Line)
	assert.Contains(t, l.Skipped[0].Reason, "SendRecv")

	out, err := runCLI(t, "", "show-decisions", "--log", file, "--node", "h100")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	assert.Contains(t, lines[0], "TUNING decisions of rank 0 (2 processes logged them")
	assert.Contains(t, lines[2], "same")
	assert.Contains(t, lines[3], "TREE/SIMPLE")
	assert.Contains(t, lines[3], "RING/LL")
	assert.Contains(t, out, "5 calls, 3 (60.0 %) where collplan picks what NCCL ran")
	assert.Contains(t, out, "skipped "+file+":5: SendRecv is not a modelled collective")

	// The 2.20-2.22 format names no collective: skipped, unless --coll says which.
	old := "pcie:7:7 [0] NCCL INFO 8 Bytes -> Algo 1 proto 0 time 12.600000\n"
	oldFile := filepath.Join(t.TempDir(), "old.log")
	require.NoError(t, os.WriteFile(oldFile, []byte(old), 0o600))
	l = showJSON(t, "--log", oldFile, "--node", "a100")
	assert.Empty(t, l.Rows)
	require.Len(t, l.Skipped, 1)
	assert.Contains(t, l.Skipped[0].Reason, "--coll")
	l = showJSON(t, "--log", oldFile, "--node", "a100", "--coll", "allreduce")
	require.Len(t, l.Rows, 1)
	require.NotNil(t, l.Rows[0].NCCLTimeUS)
	assert.Equal(t, 12.6, *l.Rows[0].NCCLTimeUS)
	assert.Equal(t, "RING/LL", l.Rows[0].NCCLAlgo+"/"+l.Rows[0].NCCLProto)
}

// TestShowDecisionsBadInput: no --log, a missing file, a log without decisions: exit status 2
// with the flag or file named.
func TestShowDecisionsBadInput(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.log")
	require.NoError(t, os.WriteFile(empty, []byte("host:1:1 [0] NCCL INFO NCCL version 2.30.7\n"), 0o600))
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--node", "h100"}, "give one of --log (a TUNING log) or --dump"},
		{[]string{"--node", "h100", "--log", "/nonexistent/x.log"}, "--log: open /nonexistent/x.log"},
		{[]string{"--node", "h100", "--log", empty}, "no TUNING decision lines"},
		{[]string{"--log", empty}, "--node"},
	} {
		_, err := runCLI(t, "", append([]string{"show-decisions"}, tc.args...)...)
		require.Error(t, err, "%v", tc.args)
		var ue usageError
		assert.ErrorAs(t, err, &ue, "%v: %v", tc.args, err)
		assert.Contains(t, err.Error(), tc.msg)
	}
}

// TestShowDecisionsDump reads a profiler dump (profile/testdata/good.jsonl): rows per collective,
// dtype, size and pipelined ops, each with its calls and the median of their measured times, as
// worked out here from the file's lines; a call without GPU stamps has no measured time; NCCL's
// per-rank bytes are the dump's model bytes over 8 ranks for AllGather and ReduceScatter; a dump
// of another shape than the topology's is refused.
func TestShowDecisionsDump(t *testing.T) {
	dump := "../../profile/testdata/good.jsonl"
	l := showJSON(t, "--dump", dump, "--node", "h100")
	assert.Equal(t, "profiler-dump", l.Kind)
	assert.Equal(t, "profiler v6 schema 1", l.Format)
	assert.Contains(t, l.Process, "rank 3 (node-a:4242, comm 00000a0000000106)")
	assert.Equal(t, 5, l.Calls)
	type row struct {
		coll, dtype     string
		pipe            int
		bytes, model    int64
		calls           int
		cell            string
		measured        float64 // -1: not timed
		chLo, chHi      int
		legalInTheModel bool
	}
	want := []row{
		{"AllGather", "bfloat16", 1, 2048, 16384, 1, "RING/LL", 9.0, 0, 3, true},          // numPipeOps null: priced as 1
		{"AllReduce", "float32", 1, 1 << 20, 1 << 20, 2, "RING/SIMPLE", 40.0, 0, 1, true}, // median of 41 and 39 us
		{"AllReduce", "float32", 2, 1 << 20, 1 << 20, 1, "RING/SIMPLE", 44.0, 0, 1, true},
		{"ReduceScatter", "fp8e4m3", 1, 1024, 8192, 1, "PAT/SIMPLE", -1, 0, 0, false}, // PAT needs one rank per node
	}
	require.Len(t, l.Rows, len(want))
	for i, w := range want {
		r := l.Rows[i]
		assert.Equal(t, w.coll+" "+w.dtype, r.Coll+" "+r.Dtype, "row %d", i)
		assert.Equal(t, w.pipe, r.PipeOps, "row %d", i)
		assert.Equal(t, w.bytes, r.Bytes, "row %d", i)
		assert.Equal(t, w.model, r.ModelBytes, "row %d", i)
		assert.Equal(t, w.calls, r.Calls, "row %d", i)
		assert.Equal(t, w.cell, r.NCCLAlgo+"/"+r.NCCLProto, "row %d", i)
		if w.measured < 0 {
			assert.Nil(t, r.MeasuredUS, "row %d", i)
		} else if assert.NotNil(t, r.MeasuredUS, "row %d", i) {
			assert.InDelta(t, w.measured, *r.MeasuredUS, 1e-9, "row %d", i)
		}
		require.NotNil(t, r.ChannelLo)
		assert.Equal(t, [2]int{w.chLo, w.chHi}, [2]int{*r.ChannelLo, *r.ChannelHi}, "row %d", i)
		assert.Equal(t, w.legalInTheModel, r.Note == "", "row %d: %s", i, r.Note)
	}
	out, err := runCLI(t, "", "show-decisions", "--dump", dump, "--node", "h100")
	require.NoError(t, err)
	assert.Contains(t, out, "measured by collplan's profiler")
	assert.Contains(t, out, "40.00")
	assert.NotContains(t, out, "priced by NCCL")
	// --nccl names the release whose model prices collplan's picks, in the header and the JSON.
	out, err = runCLI(t, "", "show-decisions", "--dump", dump, "--node", "h100", "--nccl", "2.28")
	require.NoError(t, err)
	assert.Contains(t, out, "priced on node h100 x1 (8 ranks), priced by NCCL 2.28.3's model, op")
	out, err = runCLI(t, "", "show-decisions", "--json", "--dump", dump, "--node", "h100", "--nccl", "2.28")
	require.NoError(t, err)
	assert.Contains(t, out, `"nccl": "2.28.3"`)

	_, err = runCLI(t, "", "show-decisions", "--dump", dump, "--node", "h100", "--nodes", "2")
	var ue usageError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), "the communicator has 8 ranks on 1 nodes; node h100 x2 has 16 on 2")
	_, err = runCLI(t, "", "show-decisions", "--dump", dump, "--log", dump, "--node", "h100")
	require.ErrorAs(t, err, &ue)
	_, err = runCLI(t, "", "show-decisions", "--dump", dump, "--node", "h100", "--dtype", "float16")
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), "--dtype")
}
