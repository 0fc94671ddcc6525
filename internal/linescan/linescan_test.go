package linescan

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scanAll returns the lengths of the lines read and the error.
func scanAll(in io.Reader) ([]int, int, error) {
	s := New("in", in)
	var got []int
	for s.Scan() {
		got = append(got, len(s.Text()))
		if len(got) != s.Line() {
			return nil, 0, errors.New("line count")
		}
	}
	return got, s.Line(), s.Err()
}

func TestScanner(t *testing.T) {
	const mib = 1 << 20
	x := func(n int) string { return strings.Repeat("x", n) }
	for _, tc := range []struct {
		name string
		in   string
		want []int  // line lengths read
		err  string // "" at the end of the input
	}{
		{"empty", "", nil, ""},
		{"lines", "a\nbc\r\n\nd", []int{1, 2, 0, 1}, ""},
		{"2 MiB", "a\n" + x(2*mib) + "\nb\n", []int{1, 2 * mib, 1}, ""},
		{"exactly 16 MiB", x(16*mib) + "\nb\n", []int{16 * mib, 1}, ""},
		{"exactly 16 MiB with CRLF", x(16*mib) + "\r\nb\n", []int{16 * mib, 1}, ""},
		{"exactly 16 MiB at the end", "a\n" + x(16*mib), []int{1, 16 * mib}, ""},
		{"one byte over", "a\nb\n" + x(16*mib+1) + "\nc\n", []int{1, 1}, "in:3: line longer than 16777216 bytes"},
		{"one byte over with CRLF", "a\n" + x(16*mib+1) + "\r\n", []int{1}, "in:2: line longer than 16777216 bytes"},
		{"one byte over at the end", "a\n" + x(16*mib+1), []int{1}, "in:2: line longer than 16777216 bytes"},
		{"17 MiB", x(17*mib) + "\n", nil, "in:1: line longer than 16777216 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := scanAll(strings.NewReader(tc.in))
			assert.Equal(t, tc.want, got)
			if tc.err == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tc.err, err.Error())
			var le *LongLineError
			require.True(t, errors.As(err, &le))
			assert.Equal(t, len(tc.want)+1, le.Line)
		})
	}
}

func TestScannerReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	got, n, err := scanAll(io.MultiReader(strings.NewReader("a\nb\n"), iotest.ErrReader(boom)))
	assert.Equal(t, []int{1, 1}, got, "the lines before the error")
	assert.Equal(t, 2, n)
	assert.Equal(t, boom, err)
}
