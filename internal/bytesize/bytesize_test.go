package bytesize

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"4096", 4096}, {"1K", 1024}, {"1k", 1024}, {"4KiB", 4096}, {"1MiB", 1 << 20},
		{"2M", 2 << 20}, {"1G", 1 << 30}, {"1GiB", 1 << 30}, {"3 MiB", 3 << 20}, {"1T", 1 << 40},
		{"64B", 64}, {"8MB", 8 << 20},
	} {
		got, err := Parse(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{"", "-1", "-4K", "1.5M", "abc", "K", "1Q", "9223372036854775807K"} {
		_, err := Parse(in)
		assert.Error(t, err, in)
	}
}

func TestFormat(t *testing.T) {
	assert.Equal(t, "1 MiB", Format(1<<20))
	assert.Equal(t, "1536 KiB", Format(1536<<10))
	assert.Equal(t, "1000 B", Format(1000))
	assert.Equal(t, "0 B", Format(0))
}

func TestFlag(t *testing.T) {
	v := int64(7)
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(Flag{V: &v}, "size", "")
	require.NoError(t, fs.Parse([]string{"-size", "4K"}))
	assert.Equal(t, int64(4096), v)
	assert.Equal(t, "4096", Flag{V: &v}.String())
	assert.Error(t, fs.Parse([]string{"-size", "-1"}))
	assert.Equal(t, int64(4096), v, "a bad value leaves the flag as it was")
	assert.Equal(t, "", Flag{}.String())
}

func TestApprox(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"},
		{23896200 << 10, "22.8 GiB"}, // 23896200 KiB / 1048576 = 22.79 GiB
		{64 << 30, "64.0 GiB"}, {-2048, "-2.0 KiB"},
	} {
		assert.Equal(t, tc.want, Approx(tc.n), "%d", tc.n)
	}
}
