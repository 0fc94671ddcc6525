package calibrate

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/internal/linescan"
)

// readLogLines collects a logReader's lines, its physical line count and its error.
func readLogLines(file string, r io.Reader) ([]logLine, int, error) {
	lr := &logReader{file: file, r: r}
	var out []logLine
	for l := range lr.lines() {
		out = append(out, l)
	}
	if lr.err != nil {
		return nil, lr.phys, lr.err
	}
	return out, lr.phys, nil
}

func TestReadLogLines(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []logLine
	}{
		{"plain and CRLF", "a\r\n\nb\n", []logLine{{1, "a", -1}, {2, "", -1}, {3, "b", -1}}},
		{"srun labels", " 0: # x\n12: host:1:2 [4] NCCL INFO y\n3:no space\n", []logLine{
			{1, "# x", 0}, {2, "host:1:2 [4] NCCL INFO y", 12}, {3, "3:no space", -1}}},
		{"tag pieces on one line", "[1,0]<stdout>:   10[1,0]<stdout>:24  x\n", []logLine{{1, "   1024  x", 0}}},
		{"a piece continues on a later line", "[1,0]<stdout>:  a b[1,5]<stderr>:warn\n[1,2]<stdout>:other\n[1,0]<stdout>: c d\n",
			[]logLine{{1, "warn", 5}, {1, "  a b c d", 0}, {2, "other", 2}}},
		{"text before the first tag", "junk [1,3]<stdout>:x\n", []logLine{{1, "junk ", -1}, {1, "x", 3}}},
		{"pieces cut off at the end", "[1,0]<stdout>:  123[1,1]<stdout>:done\n[1,4]<stdout>:tail[1,1]<stdout>:more\n",
			[]logLine{{1, "done", 1}, {1, "  123", 0}, {2, "more", 1}, {2, "tail", 4}}},
		{"stdout and stderr of one rank are separate", "[1,0]<stdout>:a[1,0]<stderr>:b\n[1,0]<stdout>:c\n",
			[]logLine{{1, "b", 0}, {1, "ac", 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := readLogLines("f", strings.NewReader(tt.in))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	_, _, err := readLogLines("f", iotest.ErrReader(errors.New("disk on fire")))
	assert.EqualError(t, err, "calibrate: f: disk on fire")
	_, n, err := readLogLines("f", strings.NewReader("ok\n"+strings.Repeat("x", linescan.MaxBytes+10)))
	assert.EqualError(t, err, "f:2: line longer than 16777216 bytes")
	assert.Equal(t, 1, n)
}

func TestParseNCCLLine(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		want ncclLine
	}{
		{"host:12:34 [3] NCCL INFO hello world", true, ncclLine{level: "INFO", msg: "hello world", host: "host", pid: 12, dev: 3}},
		{"[2025-06-11 10:02:02] h-1.x:1:2 [0] NCCL WARN  spaced ", true, ncclLine{level: "WARN", msg: "spaced", host: "h-1.x", pid: 1, dev: 0, start: 22}},
		{"[10:02:02]h:1:2 [7] NCCL TRACE t", true, ncclLine{level: "TRACE", msg: "t", host: "h", pid: 1, dev: 7, start: 10}},
		{"NCCL INFO bare", true, ncclLine{level: "INFO", msg: "bare", pid: -1, dev: -1}},
		{"xNCCL INFO no; then NCCL INFO yes", true, ncclLine{level: "INFO", msg: "yes", pid: -1, dev: -1, start: 20}},
		{"NCCL INFOS no", false, ncclLine{}},
		{"NCCL INFO", true, ncclLine{level: "INFO", msg: "", pid: -1, dev: -1}},
		{"no nccl here", false, ncclLine{}},
	}
	for _, tt := range tests {
		got, ok := parseNCCLLine(tt.in)
		assert.Equal(t, tt.ok, ok, tt.in)
		assert.Equal(t, tt.want, got, tt.in)
	}
}

func TestProblems(t *testing.T) {
	ps := Problems{{File: "a", Line: 1, Msg: "x"}, {File: "b", Line: 2, Msg: "y"}}
	assert.Equal(t, "a:1: x\nb:2: y", ps.Error())
	assert.NoError(t, Problems(nil).errOrNil())
	var target Problems
	assert.True(t, errors.As(ps.errOrNil(), &target))
}

// TestLogLineLength: a sweep or log line of up to 16 MiB is read; a longer one is a Problem naming
// the file and the line.
func TestLogLineLength(t *testing.T) {
	const mib = 1 << 20
	for _, n := range []int{2 * mib, 16 * mib} {
		got, nphys, err := readLogLines("f", strings.NewReader("ok\n"+strings.Repeat("x", n)+"\nend\n"))
		require.NoError(t, err, "a line of %d bytes", n)
		assert.Equal(t, 3, nphys)
		require.Len(t, got, 3)
		assert.Len(t, got[1].text, n)
		assert.Equal(t, logLine{line: 3, text: "end", rank: -1}, got[2])
	}
	_, _, err := readLogLines("f", strings.NewReader("ok\n\n"+strings.Repeat("x", 16*mib+1)+"\nend\n"))
	require.Error(t, err)
	assert.Equal(t, "f:3: line longer than 16777216 bytes", err.Error())
}

// TestLogLinesStream: lines are yielded as they are read, before the input ends (here, before it
// fails); a line whose place depends on an unfinished piece waits for it.
func TestLogLinesStream(t *testing.T) {
	boom := errors.New("disk on fire")
	in := io.MultiReader(strings.NewReader("a\n[1,0]<stdout>:x[1,1]<stdout>:y\nb\n[1,0]<stdout>:z\nc\n[1,2]<stdout>:w[1,1]<stdout>:v\nd\n"),
		iotest.ErrReader(boom))
	lr := &logReader{file: "f", r: in}
	var got []logLine
	for l := range lr.lines() {
		got = append(got, l)
	}
	assert.Equal(t, []logLine{{1, "a", -1}, {2, "y", 1}, {2, "xz", 0}, {3, "b", -1}, {5, "c", -1}, {6, "v", 1}},
		got, "all but d and the unfinished w of line 6 (d must follow it)")
	assert.EqualError(t, lr.err, "calibrate: f: disk on fire")
	assert.Equal(t, 7, lr.phys)

	// A consumer that stops early stops the reading.
	lr = &logReader{file: "f", r: strings.NewReader("a\nb\nc\n")}
	for l := range lr.lines() {
		if l.text == "b" {
			break
		}
	}
	assert.Equal(t, 2, lr.phys)
	assert.NoError(t, lr.err)
}
