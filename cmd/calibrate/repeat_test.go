package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/costmodel"
)

const repeatHeader = `# nccl-tests version 2.19.6 nccl-headers=23007 nccl-library=23007
# Collective test starting: all_reduce_perf
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
`

// TestMinOfRuns: per size, the row of the fastest run is kept; a spike in one run does not survive.
func TestMinOfRuns(t *testing.T) {
	row := func(n int, tm string) string {
		return strings.Join([]string{"", strconv.Itoa(n), strconv.Itoa(n / 4), "float", "sum", "-1", tm, "0.00", "0.00", "0", tm, "0.00", "0.00", "0"}, "    ") + "\n"
	}
	runs := [][]byte{
		[]byte(repeatHeader + row(1024, "10.0") + row(4096, "900.0") + row(16384, "30.0")),
		[]byte(repeatHeader + row(1024, "12.0") + row(4096, "20.0") + row(16384, "31.0")),
		[]byte(repeatHeader + row(1024, "11.0") + row(4096, "21.0") + row(16384, "29.5")),
	}
	out, err := minOfRuns("x.txt", runs, calibrate.HalfInPlace)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(out), "# calibrate --repeat 3: each row below is the fastest of 3 runs"))
	sw, err := calibrate.ParseSweep("x.txt", bytes.NewReader(out))
	require.NoError(t, err)
	require.Len(t, sw.Rows, 3)
	var got []float64
	for _, r := range sw.Rows {
		got = append(got, r.IP.TimeUS)
	}
	assert.Equal(t, []float64{10, 20, 29.5}, got)

	// The fastest run is the fastest in the half the fit uses.
	halves := func(oop, ip string) string {
		return strings.Join([]string{"", "1024", "256", "float", "sum", "-1", oop, "0.00", "0.00", "0", ip, "0.00", "0.00", "0"}, "    ") + "\n"
	}
	runs = [][]byte{[]byte(repeatHeader + halves("10.0", "50.0")), []byte(repeatHeader + halves("20.0", "30.0"))}
	for half, want := range map[string][2]float64{calibrate.HalfInPlace: {20, 30}, calibrate.HalfOutOfPlace: {10, 50}} {
		out, err := minOfRuns("x.txt", runs, half)
		require.NoError(t, err)
		sw, err := calibrate.ParseSweep("x.txt", bytes.NewReader(out))
		require.NoError(t, err)
		require.Len(t, sw.Rows, 1)
		assert.Equal(t, want, [2]float64{sw.Rows[0].OOP.TimeUS, sw.Rows[0].IP.TimeUS}, half)
	}
}

// TestRunRepeat: --run --repeat 2 runs each pinned sweep twice, keeps the minimum per size and
// says so in each pinned sweep's preamble and the manifest's note (the free sweep runs once).
func TestRunRepeat(t *testing.T) {
	bin := needCollbench(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	sweeps := filepath.Join(dir, "sweeps")
	var out, errb bytes.Buffer
	require.NoError(t, run(ctx, []string{"--node", "cpu", "--run", "--quick", "--repeat", "2", "--max", "64K", "--collbench", bin,
		"--sweeps-out", sweeps, "--out", filepath.Join(dir, "cpu.fit.toml"), "--json"}, &out, &errb), errb.String())
	assert.Contains(t, errb.String(), "each pinned sweep runs 2 times")
	man, err := calibrate.LoadManifest(filepath.Join(sweeps, calibrate.ManifestName))
	require.NoError(t, err)
	for _, e := range man.Sweeps {
		data, err := os.ReadFile(filepath.Join(sweeps, e.File))
		require.NoError(t, err)
		pinned := e.Algo != ""
		assert.Equal(t, pinned, strings.HasPrefix(string(data), "# calibrate --repeat 2:"), e.File)
		assert.Equal(t, pinned, strings.Contains(e.Note, "minimum time per size"), e.Note)
	}
}

// TestRepeatRunsInRounds: with --repeat 3, runSweeps runs every pinned sweep's first run, then every
// sweep's second, then every third, so that a slow spell of the host reaches all runs of one cell
// only when it lasts the whole calibration; the free choice runs once, in the first round. The fake
// collbench logs its pin and the run's ordinal; each sweep's kept row is the fastest of its runs.
func TestRepeatRunsInRounds(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	fake := filepath.Join(dir, "collbench")
	// The time printed is 30 - 10*(calls so far of this pin): each cell's third run is its fastest.
	script := `#!/bin/sh
pin=free
while [ $# -gt 0 ]; do [ "$1" = --algo ] && pin=$2; shift; done
echo "$pin" >>` + log + `
n=$(grep -c "^$pin\$" ` + log + `)
t=$((40 - 10 * n))
cat <<'H'
` + repeatHeader + `H
echo "  1024  256  float  sum  -1  $t.0  0.00  0.00  0  $t.0  0.00  0.00  0"
`
	require.NoError(t, os.WriteFile(fake, []byte(script), 0o755))
	specs := []sweepSpec{
		{coll: costmodel.AllReduce, algo: "Ring", proto: "LL", file: "allreduce-ring-ll.txt"},
		{coll: costmodel.AllReduce, algo: "Tree", proto: "Simple", file: "allreduce-tree-simple.txt"},
		{coll: costmodel.AllReduce, file: "allreduce-free.txt"},
	}
	cfg := sweepConfig{collbench: fake, np: 2, nodes: 1, gpn: 2, transport: "shm", minB: 1024, maxB: 1024, fact: 2,
		iters: 1, warmup: 0, repeat: 3, half: calibrate.HalfInPlace}
	out := filepath.Join(dir, "sweeps")
	require.NoError(t, runSweeps(context.Background(), cfg, specs, out, io.Discard))
	calls, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Equal(t, "Ring\nTree\nfree\nRing\nTree\nRing\nTree\n", string(calls))
	for file, want := range map[string]float64{"allreduce-ring-ll.txt": 10, "allreduce-tree-simple.txt": 10, "allreduce-free.txt": 30} {
		data, err := os.ReadFile(filepath.Join(out, file))
		require.NoError(t, err)
		sw, err := calibrate.ParseSweep(file, bytes.NewReader(data))
		require.NoError(t, err)
		require.Len(t, sw.Rows, 1, file)
		assert.Equal(t, want, sw.Rows[0].IP.TimeUS, file)
	}
	man, err := calibrate.LoadManifest(filepath.Join(out, calibrate.ManifestName))
	require.NoError(t, err)
	require.Len(t, man.Sweeps, 3)
	assert.Contains(t, man.Sweeps[0].Note, "run 3 times in rounds over every sweep")
}
