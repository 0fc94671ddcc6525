package calibrate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
)

// parseLogsFile parses testdata/logs/name as sweeps.
func parseLogsFile(t *testing.T, name string) []*Sweep {
	t.Helper()
	path := filepath.Join("testdata", "logs", name)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	ss, err := ParseSweeps(path, f)
	require.NoError(t, err, "ParseSweeps(%s)", path)
	return ss
}

// problemAt returns the messages of the problems on line, for assertions.
func problemsAt(ps []Problem, line int) []string {
	var out []string
	for _, p := range ps {
		if p.Line == line {
			out = append(out, p.Msg)
		}
	}
	return out
}

// TestLauncherRankPrefix: MPICH/Intel MPI's "-prepend-rank" puts "[N] " before every line. It is the
// launcher's rank, like srun's "N: ", not NCCL_DEBUG_TIMESTAMP_FORMAT's "[timestamp] ": the table
// under it is read, and TUNING lines get Rank N and no timestamp.
func TestLauncherRankPrefix(t *testing.T) {
	t.Run("the table under the prefix", func(t *testing.T) {
		ss := parseLogsFile(t, "ar_prepend_rank.txt")
		require.Len(t, ss, 1)
		s := ss[0]
		assert.Equal(t, "all_reduce_perf", s.Program)
		assert.Equal(t, "2.30.7", s.NCCLVersion)
		assert.Equal(t, 4, s.Ranks)
		assert.Equal(t, "LL128", s.Pin.Proto)
		require.Len(t, s.Rows, 7)
		assert.Equal(t, int64(4096), s.Rows[0].Bytes)
		assert.Equal(t, 14.05, s.Rows[0].IP.TimeUS)
		assert.Empty(t, s.Bad)
	})

	for _, tc := range []struct {
		name, line  string
		rank, dev   int
		stamp, host string
	}{
		{"prepend-rank", "[12] h:1:2 [4] NCCL INFO AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}", 12, 4, "", "h"},
		{"rank then timestamp", "[3] [2025-06-11 10:02:01] h:1:2 [3] NCCL INFO AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}", 3, 3, "2025-06-11 10:02:01", "h"},
		{"timestamp only", "[2025-06-11 10:02:01] h:1:2 [0] NCCL INFO AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}", -1, 0, "2025-06-11 10:02:01", "h"},
		{"srun label", " 7: h:1:2 [7] NCCL INFO AllReduce: 8 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}", 7, 7, "", "h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, _, err := ParseTuning("x.log", strings.NewReader(tc.line+"\n"))
			require.NoError(t, err)
			require.Len(t, ds, 1)
			assert.Equal(t, tc.rank, ds[0].Rank, "rank")
			assert.Equal(t, tc.dev, ds[0].Dev, "dev")
			assert.Equal(t, tc.stamp, ds[0].Timestamp, "timestamp")
			assert.Equal(t, tc.host, ds[0].Host, "host")
		})
	}
	t.Run("TUNING line of the fixture", func(t *testing.T) {
		f, err := os.Open(filepath.Join("testdata", "logs", "ar_prepend_rank.txt"))
		require.NoError(t, err)
		defer f.Close()
		ds, _, err := ParseTuning("ar_prepend_rank.txt", f)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		assert.Equal(t, 0, ds[0].Rank)
		assert.Empty(t, ds[0].Timestamp)
	})
}

// TestCollectiveFromColumns: a table without "# Collective test starting" names its collective by
// its columns (root, redop, bytes against elements x type size) and busbw/algbw (nccl-tests' bus
// factors, reference §15 item 10: AllReduce 2(n-1)/n, AllGather and ReduceScatter (n-1)/n,
// Broadcast and Reduce 1), with a warning saying so; where they do not decide, nothing is inferred.
func TestCollectiveFromColumns(t *testing.T) {
	ss := parseLogsFile(t, "ar_no_start_line.txt")
	require.Len(t, ss, 1)
	s := ss[0]
	require.True(t, s.CollKnown, "warnings: %v", s.Warnings)
	assert.Equal(t, capabilities.AllReduce, s.Coll)
	var msgs []string
	for _, w := range s.Warnings {
		msgs = append(msgs, w.Msg)
	}
	assert.Contains(t, strings.Join(msgs, "\n"), "inferred AllReduce")

	hdr := "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
	for _, tc := range []struct {
		name, rows string
		want       capabilities.Coll
		known      bool
	}{
		{"allreduce 4 ranks", "1048576 262144 float sum -1 40.00 26.21 39.32 0 40.00 26.21 39.32 0\n", capabilities.AllReduce, true},
		{"allgather 8 ranks", "1048576 32768 float none -1 40.00 26.21 22.94 0 40.00 26.21 22.94 0\n", capabilities.AllGather, true},
		{"reducescatter 4 ranks", "1048576 65536 float sum -1 40.00 26.21 19.66 0 40.00 26.21 19.66 0\n", capabilities.ReduceScatter, true},
		{"broadcast", "1048576 262144 float none 0 40.00 26.21 26.21 0 40.00 26.21 26.21 0\n", capabilities.Broadcast, true},
		{"reduce", "1048576 524288 half sum 0 40.00 26.21 26.21 0 40.00 26.21 26.21 0\n", capabilities.Reduce, true},
		{"ratio of no rank count", "1048576 262144 float sum -1 40.00 26.21 31.45 0 40.00 26.21 31.45 0\n", 0, false},
		{"ratio against the columns", "1048576 32768 float none -1 40.00 26.21 26.21 0 40.00 26.21 26.21 0\n", 0, false},
		{"too small to read the ratio", "1024 256 float sum -1 40.00 0.03 0.05 0 40.00 0.03 0.05 0\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSweep("x.txt", strings.NewReader(hdr+tc.rows))
			require.NoError(t, err)
			assert.Equal(t, tc.known, s.CollKnown, "warnings: %v", s.Warnings)
			if tc.known {
				assert.Equal(t, tc.want, s.Coll)
			}
			var found bool
			for _, w := range s.Warnings {
				if strings.HasPrefix(w.Msg, "nothing names the collective") {
					found = true
					assert.Equal(t, 1, w.Line, w.Msg)
				}
			}
			assert.True(t, found, "a warning says how the collective was named: %v", s.Warnings)
		})
	}
}

// TestAbsurdAndConflictingRows: the fixture's absurd times, conflicting duplicate sizes, fractional
// and oversized sizes and NUL bytes are each named by file and line, and none of them is fitted.
func TestAbsurdAndConflictingRows(t *testing.T) {
	ss := parseLogsFile(t, "ar_absurd.txt")
	require.Len(t, ss, 1)
	s := ss[0]
	file := filepath.Join("testdata", "logs", "ar_absurd.txt")
	all := append(append([]Problem(nil), s.Bad...), s.Warnings...)
	for _, p := range all {
		assert.Equal(t, file, p.File)
	}
	for _, tc := range []struct {
		line int
		want string
	}{
		{16, "1e+308"},
		{17, "1e-300"},
		{13, "65536 B"},
		{18, "65536 B"},
		{19, "8388608.5"},
		{20, "4398046511104"},
		{21, "NUL"},
	} {
		msgs := problemsAt(all, tc.line)
		require.NotEmpty(t, msgs, "line %d: no problem in %v", tc.line, all)
		assert.Contains(t, strings.Join(msgs, "\n"), tc.want, "line %d", tc.line)
	}
	valid := map[int][2]bool{}
	for _, r := range s.Rows {
		valid[r.Line] = [2]bool{r.OOP.Valid, r.IP.Valid}
	}
	for line, want := range map[int][2]bool{
		11: {true, true}, 12: {true, true}, 14: {true, true}, 15: {true, true}, 22: {true, true},
		13: {false, false}, 18: {false, false}, // 9x apart: which one is right is unknown
		16: {false, true}, 17: {true, false},
		21: {true, true}, // the row after the NUL bytes is whole
	} {
		got, ok := valid[line]
		require.True(t, ok, "line %d is a row", line)
		assert.Equal(t, want, got, "line %d: out-of-place, in-place valid", line)
	}
	for _, line := range []int{19, 20} {
		_, ok := valid[line]
		assert.False(t, ok, "line %d is not a row to fit", line)
	}
}

// TestLoadSweepsOneFile: --sweeps FILE with one sweep file reads that file; only a .toml is a
// manifest.
func TestLoadSweepsOneFile(t *testing.T) {
	path := filepath.Join("testdata", "logs", "ar_no_start_line.txt")
	sweeps, _, err := LoadSweeps(path)
	require.NoError(t, err)
	require.Len(t, sweeps, 1)
	assert.Equal(t, path, sweeps[0].File)
	assert.Len(t, sweeps[0].Rows, 5)
}

// TestLoadSweepsUnreadableEntry: a manifest entry whose file cannot be read is an error naming the
// manifest's line, not a warning after which the directory's other files are fitted without the
// manifest's pins.
func TestLoadSweepsUnreadableEntry(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "fit", "h200-2n", "ring.txt"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name, entry string
		setup       func(dir string)
		want        string
	}{
		{"missing (a typo)", "rign.txt", func(string) {}, `file "rign.txt": no such file or directory`},
		{"a directory", "sub.txt", func(dir string) { require.NoError(t, os.Mkdir(filepath.Join(dir, "sub.txt"), 0o755)) },
			`file "sub.txt": is a directory`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "ring.txt"), data, 0o644))
			tc.setup(dir)
			man := filepath.Join(dir, ManifestName)
			require.NoError(t, os.WriteFile(man, []byte("[[sweep]]\nfile = \""+tc.entry+"\"\nalgo = \"Ring\"\n"), 0o644))
			sweeps, _, err := LoadSweeps(dir)
			require.Error(t, err, "sweeps read: %d", len(sweeps))
			assert.Contains(t, err.Error(), man+":1: "+tc.want)
			_, _, err = LoadSweeps(man)
			require.Error(t, err)
			assert.Contains(t, err.Error(), man+":1: "+tc.want)
		})
	}
}

// TestRowsCutByNCCLLines: with NCCL_DEBUG_SUBSYS=TUNING, NCCL logs a line per call while
// nccl-tests prints a row in pieces, so the pieces of one row sit on several lines, each followed
// by a log line without a newline between ("-1" then "h100box:2101:2101 [0] NCCL INFO", after
// waynehacking8/nccl-collectives-bench's g4_Ring.log). The rows are read from their pieces, at the
// line of their first piece; a row whose last piece never comes is named there; the TUNING lines
// of the same file are all read too.
func TestRowsCutByNCCLLines(t *testing.T) {
	ss := parseLogsFile(t, "ar_tuning_split_rows.txt")
	require.Len(t, ss, 1)
	s := ss[0]
	type row struct {
		line    int
		bytes   int64
		oop, ip float64
	}
	var got []row
	for _, r := range s.Rows {
		got = append(got, row{r.Line, r.Bytes, r.OOP.TimeUS, r.IP.TimeUS})
		assert.True(t, r.OOP.Valid && r.IP.Valid, "line %d", r.Line)
	}
	// The pieces as the file's comment lists them (lines 22, 24, 27; 28, 31, 33; 34, 36).
	assert.Equal(t, []row{{22, 268435456, 1188.10, 1184.70}, {28, 536870912, 2318.40, 2311.90},
		{34, 1073741824, 4522.60, 4519.80}}, got)
	require.Len(t, s.Bad, 1)
	assert.Equal(t, 37, s.Bad[0].Line)
	assert.Contains(t, s.Bad[0].Msg, "garbled by an NCCL log line on the same line: 2147483648 536870912 float sum -1h100box")
	assert.Equal(t, 4, s.Ranks)
	assert.Equal(t, "2.29.2", s.NCCLVersion)

	data, err := os.ReadFile(filepath.Join("testdata", "logs", "ar_tuning_split_rows.txt"))
	require.NoError(t, err)
	f, err := os.Open(filepath.Join("testdata", "logs", "ar_tuning_split_rows.txt"))
	require.NoError(t, err)
	defer f.Close()
	ds, _, err := ParseTuning("ar_tuning_split_rows.txt", f)
	require.NoError(t, err)
	assert.Len(t, ds, strings.Count(string(data), " Bytes -> Algo RING proto SIMPLE "))
}
