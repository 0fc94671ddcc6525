package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAllOpsAllTypes: -o all -d all runs every type and, for each, every op (mulsum included) in
// nccl-tests' order under one header, every check passes, and the output parses as one sweep whose
// rows name each combination.
func TestAllOpsAllTypes(t *testing.T) {
	out, stderr, err := runCollbench(t, "allreduce", "--transport", "inproc", "-np", "3", "-b", "8", "-e", "256",
		"-f", "32", "-n", "1", "-w", "0", "-c", "1", "-o", "all", "-d", "all")
	require.NoError(t, err, "%s\n%s", out, stderr)
	s := parse(t, out)
	assert.Empty(t, s.Bad)
	assert.False(t, s.Failed)
	require.Len(t, s.Rows, 2*len(allDtypes)*len(allOps), out)
	k := 0
	for _, dt := range allDtypes {
		for _, op := range allOps {
			for range 2 {
				r := s.Rows[k]
				assert.Equal(t, dt, r.Type, "row %d", r.Line)
				assert.Equal(t, op, r.Redop, "row %d", r.Line)
				assert.Zero(t, r.OOP.Wrong, "row %d", r.Line)
				assert.Zero(t, r.IP.Wrong, "row %d", r.Line)
				k++
			}
		}
	}
	assert.Empty(t, s.Dtype, "rows mix types")
	assert.Empty(t, s.Op, "rows mix ops")

	// AllGather has no operator: -o all is one pass per type.
	out, stderr, err = runCollbench(t, "allgather", "--transport", "inproc", "-np", "2", "-b", "64", "-e", "64",
		"-n", "1", "-o", "all", "-d", "all")
	require.NoError(t, err, "%s\n%s", out, stderr)
	s = parse(t, out)
	require.Len(t, s.Rows, len(allDtypes), out)
	for _, r := range s.Rows {
		assert.Equal(t, "none", r.Redop)
	}
}

// TestMulsum: -o mulsum (a PreMulSum operator with nccl-tests' per-rank scalar, 1 on even ranks and
// 2 on odd ones) checks against its closed form on rank processes, for an integer and a float type
// and for the reducing collectives.
func TestMulsum(t *testing.T) {
	for _, tc := range []struct{ coll, dt string }{
		{"allreduce", "int32"}, {"reducescatter", "float"}, {"reduce", "half"},
	} {
		out, stderr, err := runCollbench(t, append([]string{tc.coll, "-np", "3", "-o", "mulsum", "-d", tc.dt, "-r", "1"}, small...)...)
		require.NoError(t, err, "%s\n%s", out, stderr)
		s := parse(t, out)
		assert.Equal(t, "mulsum", s.Op)
		assert.Equal(t, tc.dt, s.Dtype)
		require.Len(t, s.Rows, 3, out)
		for _, r := range s.Rows {
			assert.Zero(t, r.OOP.Wrong, "%s row %d", tc.coll, r.Line)
			assert.Zero(t, r.IP.Wrong, "%s row %d", tc.coll, r.Line)
		}
		assert.False(t, s.Failed)
	}
	// The closed form is the weighted sum: for 3 ranks, 1*x0 + 2*x1 + 1*x2.
	b := &bench{o: &options{opName: "mulsum"}, n: 3}
	b.o.setCombo("int32", "mulsum")
	assert.Equal(t, 1.0*1+2*2+1*3, b.reduced(func(p int) float64 { return float64(p + 1) }))
}

// TestTimestampsAndCPUTime: -S adds nccl-tests' trailing date and time to every row and the
// timestamp column to the header; -C names the time columns cputime. Both parse.
func TestTimestampsAndCPUTime(t *testing.T) {
	for _, transport := range []string{"inproc", "shm"} {
		out, stderr, err := runCollbench(t, append([]string{"allreduce", "-np", "2", "--transport", transport, "-S", "1", "-C", "1"}, small...)...)
		require.NoError(t, err, "%s\n%s", out, stderr)
		s := parse(t, out)
		assert.Empty(t, s.Bad)
		assert.True(t, s.Timestamps, out)
		assert.True(t, s.CPUTime, out)
		require.Len(t, s.Rows, 3, out)
		for _, r := range s.Rows {
			assert.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$`, r.Stamp)
			assert.Greater(t, r.OOP.TimeUS, 0.0)
		}
		assert.Contains(t, out, "cputime")

		// With -I too: 21 fields before the timestamp.
		out, stderr, err = runCollbench(t, append([]string{"allreduce", "-np", "2", "--transport", transport, "-S", "1", "-I", "1"}, small...)...)
		require.NoError(t, err, "%s\n%s", out, stderr)
		s = parse(t, out)
		assert.Empty(t, s.Bad)
		assert.True(t, s.Timestamps)
		assert.True(t, s.PerIter)
		assert.False(t, s.CPUTime)
		require.Len(t, s.Rows, 3, out)
	}
	// Without them, neither.
	out, _, err := runCollbench(t, append([]string{"allreduce", "-np", "2", "--transport", "inproc"}, small...)...)
	require.NoError(t, err)
	s := parse(t, out)
	assert.False(t, s.Timestamps)
	assert.False(t, s.CPUTime)
	assert.False(t, strings.Contains(out, "timestamp"))
}
