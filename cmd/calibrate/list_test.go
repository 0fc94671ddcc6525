package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/calibrate"
)

// refRow is a table row as the test's own reader reads it.
type refRow struct {
	line                int
	bytes, count        int64
	typ, redop          string
	root                int // -1 without a root column
	time, algbw, busbw  [2]float64
	wrong               [2]string // #wrong or the error column, as printed
	oldLayout, validRef [2]bool
	// sectioned is true for a row after a section line ("### ALGO=Ring size=268435456"); algo and
	// proto are that line's pins, "" where it names none.
	sectioned   bool
	algo, proto string
	ipAbsent    bool // the row printed the out-of-place half only
}

var (
	refTagRE   = regexp.MustCompile(`\[\d+,\d+\]<std(?:out|err|diag)>:`)
	refRankRE  = regexp.MustCompile(`^\s*(?:\d+: |\[\d{1,7}\] )`)
	refDateRE  = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
	refClockRE = regexp.MustCompile(`^\d{2}:\d{2}:\d{2}`)
	refElt     = map[string]int64{"int8": 1, "char": 1, "uint8": 1, "int32": 4, "int": 4, "uint32": 4, "int64": 8,
		"uint64": 8, "half": 2, "float16": 2, "bfloat16": 2, "float": 4, "float32": 4, "double": 8, "float64": 8}
)

// refRead is the test's reader of nccl-tests tables, written apart from calibrate's: it cuts lines
// at NUL bytes, joins mpirun --tag-output pieces per tag, drops srun's "N: " and hydra's "[N] ",
// and reads each line whose first field is a number as a row of 12, 13 or 21 columns (two more
// with -S timestamps). It returns the rows it read and the lines that start with a number but are
// not rows it can read.
func refRead(t *testing.T, path string) (rows []refRow, bad []int) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	type text struct {
		line int
		s    string
	}
	var texts []text
	open := map[string]*text{}
	for i, raw := range strings.Split(string(data), "\n") {
		ln := i + 1
		for _, part := range strings.Split(strings.TrimRight(raw, "\r"), "\x00") {
			locs := refTagRE.FindAllStringIndex(part, -1)
			if locs == nil {
				texts = append(texts, text{ln, part})
				continue
			}
			texts = append(texts, text{ln, part[:locs[0][0]]})
			for k, loc := range locs {
				end := len(part)
				if k+1 < len(locs) {
					end = locs[k+1][0]
				}
				tag := part[loc[0]:loc[1]]
				p := open[tag]
				if p == nil {
					p = &text{line: ln}
					open[tag] = p
				}
				p.s += part[loc[1]:end]
				if k == len(locs)-1 {
					texts = append(texts, *p)
					delete(open, tag)
				}
			}
		}
	}
	for _, p := range open {
		texts = append(texts, *p)
	}
	sort.SliceStable(texts, func(i, j int) bool { return texts[i].line < texts[j].line })
	var sectioned, rowSince bool
	var algo, proto string
	// Host names NCCL's log lines carry: those of the rank lines and of lines that start with one.
	hosts := map[string]bool{}
	for i := range texts {
		texts[i].s = refRankRE.ReplaceAllString(texts[i].s, "")
		s := strings.TrimSpace(texts[i].s)
		if m := refRankHostRE.FindStringSubmatch(s); m != nil {
			hosts[m[1]] = true
		} else if m := refLogStartRE.FindStringSubmatch(s); m != nil {
			hosts[m[1]] = true
		}
	}
	// A row cut by NCCL log lines: its pieces, up to each log line that follows one without a
	// newline, joined until they read as a row; carry is the row so far and the line it began on.
	var carry string
	carryLine, runN := 0, 0
	addRow := func(r refRow, line int) {
		r.line = line
		r.sectioned, r.algo, r.proto = sectioned, algo, proto
		rowSince = true
		rows = append(rows, r)
	}
	dropCarry := func() {
		if carryLine != 0 {
			bad = append(bad, carryLine)
		}
		carry, carryLine = "", 0
	}
	for _, tx := range texts {
		s := tx.s // launcher prefixes stripped above
		if cut := refLogCut(s, hosts); cut >= 0 {
			piece := strings.Fields(s[:cut])
			if carryLine == 0 {
				if len(piece) == 0 {
					continue
				}
				if _, err := strconv.ParseInt(piece[0], 10, 64); err != nil {
					continue
				}
				carryLine = tx.line
			}
			carry += " " + strings.Join(piece, " ")
			if r, ok := refRowOf(strings.Fields(carry)); ok {
				addRow(r, carryLine)
				carry, carryLine = "", 0
			}
			continue
		}
		f := strings.Fields(s)
		if len(f) == 0 {
			continue
		}
		if carryLine != 0 {
			if r, ok := refRowOf(strings.Fields(carry + " " + s)); ok && !strings.HasPrefix(strings.TrimSpace(s), "#") {
				addRow(r, carryLine)
				carry, carryLine = "", 0
				continue
			}
			dropCarry()
		}
		if a, p, ok := refSection(s); ok {
			if rowSince || !sectioned {
				algo, proto = "", ""
			}
			sectioned, rowSince = true, false
			algo, proto = cmp.Or(a, algo), cmp.Or(p, proto)
			continue
		}
		if strings.HasPrefix(f[0], "#") && strings.Contains(s, "size") && strings.Contains(s, "count") {
			runN = 0 // a table header: a new run, whose first row says whether it prints one half
			continue
		}
		if _, err := strconv.ParseFloat(f[0], 64); err != nil {
			continue
		}
		r, ok := refRowHalves(f, runN == 0 || runN == len(f))
		if !ok || strings.Contains(s, "NCCL INFO") || strings.Contains(s, "NCCL WARN") {
			bad = append(bad, tx.line)
			continue
		}
		if runN == 0 {
			runN = len(f)
		}
		addRow(r, tx.line)
	}
	dropCarry()
	return rows, bad
}

var (
	refRankHostRE = regexp.MustCompile(`^#\s*Rank\s+\d+\s.*\bon\s+(\S+)\s+device\b`)
	refLogStartRE = regexp.MustCompile(`^([^\s:]+):\d+:\d+ \[\d+\] NCCL `)
)

// refLogCut is where an NCCL log line begins in s: at a known host's "HOST:pid:tid [N] NCCL ",
// wherever it sits in the line; -1 when none does.
func refLogCut(s string, hosts map[string]bool) int {
	best := -1
	for h := range hosts {
		for from := 0; ; {
			i := strings.Index(s[from:], h+":")
			if i < 0 {
				break
			}
			i += from
			if refLogStartRE.MatchString(s[i:]) && (best < 0 || i < best) {
				best = i
			}
			from = i + 1
		}
	}
	return best
}

// refSection reads a section line as a script that loops over NCCL_ALGO or NCCL_PROTO prints it
// before each run: '#'s, then KEY=VALUE words only, ALGO/NCCL_ALGO or PROTO/NCCL_PROTO among them.
func refSection(s string) (algo, proto string, ok bool) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "#") {
		return "", "", false
	}
	for _, w := range strings.Fields(strings.TrimLeft(s, "#")) {
		eq := strings.Index(w, "=")
		if eq <= 0 {
			return "", "", false
		}
		switch w[:eq] {
		case "ALGO", "NCCL_ALGO":
			algo, ok = w[eq+1:], true
		case "PROTO", "NCCL_PROTO":
			proto, ok = w[eq+1:], true
		}
	}
	return algo, proto, ok
}

// refRowOf reads the fields of one row.
func refRowOf(f []string) (refRow, bool) { return refRowHalves(f, false) }

// refRowHalves reads a row; oneHalf also takes a row of the out-of-place half only (8 fields, or 9
// with a root column).
func refRowHalves(f []string, oneHalf bool) (refRow, bool) {
	r := refRow{root: -1}
	if n := len(f); n >= 2 && refDateRE.MatchString(f[n-2]) && refClockRE.MatchString(f[n-1]) {
		f = f[:n-2]
	}
	n := len(f)
	halves := 2
	switch {
	case n == 12 || n == 13 || n == 21:
	case oneHalf && (n == 8 || n == 9):
		halves, r.ipAbsent = 1, true
	default:
		return r, false
	}
	var err1, err2 error
	r.bytes, err1 = strconv.ParseInt(f[0], 10, 64)
	r.count, err2 = strconv.ParseInt(f[1], 10, 64)
	r.typ, r.redop = f[2], f[3]
	elt := refElt[strings.ToLower(r.typ)]
	if err1 != nil || err2 != nil || r.bytes < 0 || r.count < 0 || r.bytes > 1<<40 || elt == 0 {
		return r, false
	}
	if (r.count == 0) != (r.bytes == 0) || (r.count > 0 && r.bytes%(r.count*elt) != 0) {
		return r, false
	}
	old := n == 12 || n == 8 // the 12-column layout: no root column, an error column
	rest := f[4:]
	if !old {
		root, err := strconv.Atoi(f[4])
		if err != nil {
			return r, false
		}
		r.root, rest = root, f[5:]
	}
	per := len(rest) / halves
	for h := 0; h < halves; h++ {
		col := rest[h*per : (h+1)*per]
		var vals [3]float64
		for i := 0; i < 3; i++ {
			v, err := strconv.ParseFloat(col[i], 64)
			if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
				return r, false
			}
			vals[i] = v
		}
		for _, x := range col[4:] { // -I columns
			if v, err := strconv.ParseFloat(x, 64); err != nil || v < 0 {
				return r, false
			}
		}
		r.time[h], r.algbw[h], r.busbw[h], r.wrong[h], r.oldLayout[h] = vals[0], vals[1], vals[2], col[3], old
		w := 0.0
		if col[3] != "N/A" {
			v, err := strconv.ParseFloat(strings.TrimSuffix(col[3], "*"), 64)
			if err != nil || v < 0 {
				return r, false
			}
			w = v
		}
		// Valid by nccl-tests' own meaning of the columns: no wrong elements, a time it can print.
		r.validRef[h] = vals[0] >= 0.01 && vals[0] <= 1e9 && (old || w == 0)
	}
	return r, true
}

// TestListAgreesWithReference: calibrate list --json agrees, row by row, with the reader above on
// every sweep-like file of the test data (calibrate's and this command's, whatever they hold):
// the same rows with the same values, no row the reader does not read, every line the reader
// cannot read listed as dropped, and every half the reader finds unfit (#wrong > 0, a time
// nccl-tests cannot print) not fitted; a half list does not fit where the reader would says why.
func TestListAgreesWithReference(t *testing.T) {
	var files []string
	for _, root := range []string{"../../calibrate/testdata", "testdata"} {
		require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch {
			case d.IsDir() || filepath.Ext(p) == ".toml":
			case strings.Contains(filepath.ToSlash(p), "/public/"): // every public sweep, whatever its name
				files = append(files, p)
			case filepath.Ext(p) == ".txt", filepath.Ext(p) == ".log", filepath.Ext(p) == ".out":
				files = append(files, p)
			}
			return nil
		}))
	}
	require.Greater(t, len(files), 20)
	for _, path := range files {
		t.Run(path, func(t *testing.T) {
			var out, errb bytes.Buffer
			require.NoError(t, run(context.Background(), []string{"list", path, "--json"}, &out, &errb), errb.String())
			var l calibrate.Listing
			require.NoError(t, json.Unmarshal(out.Bytes(), &l))
			require.Len(t, l.Files, 1)
			lf := l.Files[0]
			rows := map[int]calibrate.ListedRow{}
			pins := map[int][2]string{}
			dropped := map[int]bool{}
			for _, s := range lf.Sweeps {
				for _, r := range s.Rows {
					rows[r.Line] = r
					pins[r.Line] = [2]string{s.Algo, s.Proto}
				}
				for _, d := range s.Dropped {
					dropped[d.Line] = true
				}
			}
			ref, bad := refRead(t, path)
			t.Logf("%s: %d rows, %d lines that are not rows; list: %d rows", path, len(ref), len(bad), len(rows))
			for _, line := range bad {
				assert.True(t, dropped[line] || lf.Dropped != "", "line %d is not a row the reference reads, and list does not drop it", line)
				_, isRow := rows[line]
				assert.False(t, isRow, "line %d is not a row the reference reads, but list has it", line)
			}
			seen := map[int]bool{}
			for _, want := range ref {
				seen[want.line] = true
				got, ok := rows[want.line]
				if !assert.True(t, ok, "line %d: the reference reads a row, list does not (dropped: %v)", want.line, dropped[want.line]) {
					continue
				}
				assert.Equal(t, [6]any{want.bytes, want.count, want.typ, want.redop, want.root, 0},
					[6]any{got.Bytes, got.Count, got.Type, got.Redop, got.Root, 0}, "line %d", want.line)
				if want.sectioned {
					assert.Equal(t, [2]string{want.algo, want.proto}, pins[want.line], "line %d: NCCL_ALGO, NCCL_PROTO", want.line)
				}
				assert.Equal(t, want.ipAbsent, got.IP.Absent, "line %d: in-place half absent", want.line)
				for h, gh := range []calibrate.ListedHalf{got.OOP, got.IP} {
					if h == 1 && want.ipAbsent {
						continue
					}
					assert.Equal(t, [3]float64{want.time[h], want.algbw[h], want.busbw[h]}, [3]float64{gh.TimeUS, gh.AlgBW, gh.BusBW},
						"line %d half %d", want.line, h)
					switch w := want.wrong[h]; {
					case w == "N/A":
						assert.Equal(t, int64(-1), gh.Wrong, "line %d half %d #wrong", want.line, h)
					case want.oldLayout[h]:
						v, _ := strconv.ParseFloat(strings.TrimSuffix(w, "*"), 64)
						assert.Equal(t, v, gh.ErrorAbs, "line %d half %d error", want.line, h)
					default:
						v, _ := strconv.ParseFloat(w, 64)
						assert.Equal(t, int64(math.Round(v)), gh.Wrong, "line %d half %d #wrong", want.line, h)
					}
					if !want.validRef[h] {
						assert.False(t, gh.Valid, "line %d half %d: the reference finds it unfit, list fits it", want.line, h)
					}
					if !gh.Valid {
						assert.NotEmpty(t, got.Problems, "line %d half %d is not fitted and list says no why", want.line, h)
					}
				}
			}
			for line := range rows {
				assert.True(t, seen[line], "line %d: list has a row the reference does not read", line)
			}
		})
	}
}

// TestListCommand: calibrate list's text, help and one-line usage errors (exit status 2).
func TestListCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want []string // in stdout when code is 0, else in the one stderr line
	}{
		{[]string{"list", "../../calibrate/testdata/sweeps"}, 0, []string{
			"notes.txt:3: file dropped: no nccl-tests table",
			"ar_failed.txt:23: 33554432 B float sum: out-of-place #wrong 1.23457e+06, in-place #wrong 1.23457e+06; not fitted",
			"ar_truncated_corrupt.txt:26: dropped: size 16384 is not count 4069 × 4 B",
			"ar_old_12col_v100.txt:1: AllReduce (manifest), pin NCCL_ALGO=Ring NCCL_PROTO=Simple (manifest), NCCL 2.7.8",
			"sweeps.toml:17: warning: ar_pre2196_a100_tree_simple.txt: manifest proto \"LL128\" overrides NCCL_PROTO=Simple in the file",
		}},
		{[]string{"list", "--json=false", "../../calibrate/testdata/logs/ar_no_start_line.txt"}, 0, []string{
			"ar_no_start_line.txt:1: AllReduce (inferred), pin free, layout current",
			"warning: nothing names the collective (no \"# Collective test starting\" line): inferred AllReduce from the columns",
		}},
		{[]string{"list", "-h"}, 0, []string{"usage: calibrate list SWEEPS [--json]", "-json"}},
		{[]string{"list"}, 2, []string{"SWEEPS is required", "(run 'calibrate list -h' for the flags)"}},
		{[]string{"list", "a", "b"}, 2, []string{`unexpected argument "b"`}},
		{[]string{"list", "--bogus", "x"}, 2, []string{"-bogus"}},
		{[]string{"list", "/does/not/exist"}, 2, []string{"/does/not/exist"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runMain(t, tc.args...)
			require.Equal(t, tc.code, code, stderr)
			if tc.code == 0 {
				assert.Empty(t, stderr)
				for _, w := range tc.want {
					assert.Contains(t, stdout, w)
				}
				return
			}
			assert.Empty(t, stdout)
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			require.Len(t, lines, 1, stderr)
			for _, w := range tc.want {
				assert.Contains(t, lines[0], w)
			}
		})
	}
}
