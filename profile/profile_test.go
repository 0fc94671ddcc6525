package profile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
)

func readFile(t *testing.T, name string) (Dump, error) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	require.NoError(t, err)
	defer f.Close()
	return Read(f, name)
}

func ptr[T any](v T) *T { return &v }

func TestReadGood(t *testing.T) {
	d, err := readFile(t, "good.jsonl")
	require.NoError(t, err)
	assert.Equal(t, Header{Schema: 1, Profiler: 6, Host: "node-a", PID: 4242, CommID: "00000a0000000106",
		CommName: ptr("tp-group"), NNodes: 1, NRanks: 8, Rank: 3, MaxBytes: 64 << 20}, d.Header)
	require.Len(t, d.Colls, 5)
	assert.Equal(t, Coll{Line: 5, Seq: 0, Coll: "AllGather", Algo: "RING", Proto: "LL", NChannels: 4, Count: 1024,
		Datatype: "ncclBfloat16", Bytes: 16384, KernelChannels: 4, StartNs: ptr(uint64(300000)), Ns: ptr(uint64(9000))},
		d.Colls[3])
	assert.Nil(t, d.Colls[4].Ns, "a collective without channel stamps has no duration")
	require.NotNil(t, d.End)
	assert.Equal(t, End{Records: 5, Dropped: Drops{Cap: 1}}, *d.End)

	// By hand: AllGather 16 KiB once (9 µs); AllReduce 1 MiB three times, median of 41, 39, 44 µs.
	assert.Equal(t, []Point{
		{Coll: "AllGather", Algo: "RING", Proto: "LL", Bytes: 16384, Line: 5, N: 1, MedianUS: 9},
		{Coll: "AllReduce", Algo: "RING", Proto: "SIMPLE", Bytes: 1 << 20, Line: 2, N: 3, MedianUS: 41},
	}, d.Points())
}

func TestReadRunning(t *testing.T) {
	d, err := readFile(t, "running.jsonl")
	require.NoError(t, err)
	assert.Nil(t, d.End, "no end line: the communicator was not finalized")
	assert.Nil(t, d.Header.CommName)
	require.Len(t, d.Colls, 1)
	assert.Equal(t, ptr(4), d.Colls[0].NumPipeOps)
}

// TestReadRejects: each bad line is named by file and line, with the field at fault.
func TestReadRejects(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "good.jsonl"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(good), "\n"), "\n")
	with := func(n int, from, to string) string { // line n (1-based) with one substitution
		l := append([]string(nil), lines...)
		require.Contains(t, l[n-1], from)
		l[n-1] = strings.Replace(l[n-1], from, to, 1)
		return strings.Join(l, "\n") + "\n"
	}
	for _, c := range []struct {
		name, data, want string
	}{
		{"empty", "", "bad.jsonl: empty file"},
		{"no header", strings.Join(lines[1:], "\n"), `bad.jsonl:1: first line is "coll", want the header`},
		{"schema", with(1, `"schema":1`, `"schema":2`), "bad.jsonl:1: header: schema 2, this reader reads 1"},
		{"profiler", with(1, `"profiler":6`, `"profiler":4`), "bad.jsonl:1: header: profiler ABI 4"},
		{"commId", with(1, `"00000a0000000106"`, `"0x10"`), `bad.jsonl:1: header: commId "0x10"`},
		{"rank", with(1, `"rank":3`, `"rank":8`), "bad.jsonl:1: header: rank 8 outside 0..7"},
		{"unknown field", with(2, `"seq":0,`, `"seq":0,"extra":1,`), `bad.jsonl:2: coll: json: unknown field "extra"`},
		{"not json", with(3, `{"type"`, `{type`), "bad.jsonl:3: not a JSON object"},
		{"coll", with(2, `"AllReduce"`, `"AlltoAll"`), `bad.jsonl:2: coll: collective "AlltoAll"`},
		{"bytes", with(2, `"bytes":1048576`, `"bytes":1048577`), "bad.jsonl:2: coll: bytes 1048577, but count 262144 x ncclFloat32 (4 B) is 1048576"},
		{"bytes x ranks", with(5, `"bytes":16384`, `"bytes":2048`), "bad.jsonl:5: coll: bytes 2048, but count 1024 x ncclBfloat16 (2 B) x 8 ranks is 16384"},
		{"pipe ops", with(2, `"numPipeOps":1`, `"numPipeOps":0`), "bad.jsonl:2: coll: numPipeOps 0"},
		{"channels", with(2, `"kernelChannels":2`, `"kernelChannels":3`), "bad.jsonl:2: coll: kernelChannels 3 outside 0..nChannels (2)"},
		{"ns without stamps", with(6, `"ns":null`, `"ns":5`), "bad.jsonl:6: coll: ns and startNs"},
		{"wrong type", with(2, `"seq":0`, `"seq":-1`), "bad.jsonl:2: coll: json: cannot unmarshal number -1"},
		{"end count", with(7, `"records":5`, `"records":4`), "bad.jsonl:7: end: records 4, but the file holds 5"},
		{"after end", string(good) + lines[1] + "\n", `bad.jsonl:8: "coll" line after the end line`},
		{"second header", lines[0] + "\n" + lines[0] + "\n", "bad.jsonl:2: a second header"},
		{"unknown type", with(2, `"type":"coll"`, `"type":"p2p"`), `bad.jsonl:2: unknown line type "p2p"`},
		{"blank line", lines[0] + "\n\n", "bad.jsonl:2: empty line"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(c.data), "bad.jsonl")
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// TestCalibratePoints: good.jsonl's two timed groups, by hand, each credited to the cell it ran;
// a symmetric kernel's variant is skipped and named.
func TestCalibratePoints(t *testing.T) {
	d, err := readFile(t, "good.jsonl")
	require.NoError(t, err)
	pts, skipped := d.CalibratePoints()
	assert.Empty(t, skipped)
	assert.Equal(t, []calibrate.Point{
		{File: "good.jsonl", Line: 5, Coll: capabilities.AllGather, Bytes: 16384, TimeUS: 9,
			Cells: []calibrate.Cell{{Coll: capabilities.AllGather, Algo: capabilities.Ring, Proto: capabilities.LL}},
			Algo:  "Ring", Proto: "LL", Run: "good.jsonl"},
		{File: "good.jsonl", Line: 2, Coll: capabilities.AllReduce, Bytes: 1 << 20, TimeUS: 41,
			Cells: []calibrate.Cell{{Coll: capabilities.AllReduce, Algo: capabilities.Ring, Proto: capabilities.Simple}},
			Algo:  "Ring", Proto: "Simple", Run: "good.jsonl"},
	}, pts)

	d.Colls = append(d.Colls, Coll{Line: 9, Coll: "AllGather", Algo: "AGxLL_R", Proto: "", Bytes: 64, NChannels: 1,
		KernelChannels: 1, StartNs: ptr(uint64(1)), Ns: ptr(uint64(2000))})
	pts, skipped = d.CalibratePoints()
	assert.Len(t, pts, 2)
	assert.Equal(t, []string{"good.jsonl:9: AllGather AGxLL_R/ 64 bytes (1 collectives): not a modelled cell"}, skipped)
}
