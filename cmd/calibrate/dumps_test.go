package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeDump writes a profiler dump (docs/profile-dump.md, schema 1) of an 8-rank one-node
// communicator whose AllReduce calls took the times truth gives, three calls per size.
func writeDump(t *testing.T, dir, name string, nNodes, nRanks int, truth map[string][2]float64) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `{"type":"header","schema":1,"profiler":6,"host":"h","pid":1,"commId":"00000000000000aa","commName":null,"nNodes":%d,"nRanks":%d,"rank":0,"maxBytes":67108864}`+"\n", nNodes, nRanks)
	seq, start := 0, uint64(1000)
	records := 0
	for _, cell := range []string{"RING/LL", "RING/SIMPLE"} {
		algo, proto, _ := strings.Cut(cell, "/")
		lat, bw := truth[cell][0], truth[cell][1]
		for n := int64(1 << 10); n <= 1<<26; n *= 4 {
			us := lat + float64(n)/(bw*1e3) // the model's form: lat + bytes / (1000 x GB/s)
			for rep := 0; rep < 3; rep++ {
				fmt.Fprintf(&b, `{"type":"coll","seq":%d,"coll":"AllReduce","algo":"%s","proto":"%s","nChannels":4,"count":%d,"datatype":"ncclFloat32","bytes":%d,"numPipeOps":1,"kernelChannels":4,"startNs":%d,"ns":%d}`+"\n",
					seq, algo, proto, n/4, n, start, uint64(us*1e3+0.5))
				seq++
				records++
				start += 1e6
			}
		}
	}
	fmt.Fprintf(&b, `{"type":"end","records":%d,"dropped":{"ringFull":0,"poolFull":0,"cap":0,"io":0,"unfinished":0}}`+"\n", records)
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o600))
	return p
}

// TestCalibrateFromDumps: a job's own collectives, as the profiler dumps them, calibrate the
// table: the fit recovers the latency and bandwidth the synthetic device ran with (noiseless,
// within 1 %), the dump is named in the overlay's provenance, and a dump of another shape than
// the table's, or with --run, is refused naming the flag.
func TestCalibrateFromDumps(t *testing.T) {
	dir := t.TempDir()
	truth := map[string][2]float64{"RING/LL": {9, 60}, "RING/SIMPLE": {25, 170}}
	writeDump(t, dir, "h-1-00000000000000aa.jsonl", 1, 8, truth)
	out := filepath.Join(dir, "h100.fit.toml")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--node", "h100", "--dumps", dir, "--out", out, "--json", "--date", "2026-12-02"}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	var rep struct {
		Nodes  int `json:"nodes"`
		Params []struct {
			Cell  string  `json:"cell"`
			Kind  string  `json:"kind"`
			Value float64 `json:"value"`
		} `json:"params"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep))
	assert.Equal(t, 1, rep.Nodes)
	got := map[string]float64{}
	for _, p := range rep.Params {
		got[p.Cell+" "+p.Kind] = p.Value
	}
	for cell, tv := range truth {
		assert.InEpsilon(t, tv[0], got["AllReduce/"+cell+" lat_us"], 0.01, cell)
		assert.InEpsilon(t, tv[1], got["AllReduce/"+cell+" bw_gbps"], 0.01, cell)
	}
	overlay, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(overlay), "h-1-00000000000000aa.jsonl", "the dump is in the provenance")

	writeDump(t, dir, "other.jsonl", 2, 16, truth)
	err = run(context.Background(), []string{"--node", "h100", "--dumps", dir, "--out", filepath.Join(dir, "b.fit.toml")}, &stdout, &stderr)
	var ue usageError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), "fit one shape at a time")
	err = run(context.Background(), []string{"--node", "h100", "--dumps", filepath.Join(dir, "other.jsonl"), "--gpus-per-node", "4", "--out", filepath.Join(dir, "c.fit.toml")}, &stdout, &stderr)
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), "8 ranks per node, not --gpus-per-node 4")
	err = run(context.Background(), []string{"--node", "cpu", "--dumps", dir, "--run"}, &stdout, &stderr)
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), "--dumps")
}
