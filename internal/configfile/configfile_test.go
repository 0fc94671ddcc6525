package configfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, size int64) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		require.NoError(t, err)
		require.NoError(t, f.Truncate(size)) // sparse: no disk for the zeros
		require.NoError(t, f.Close())
		return p
	}
	const mib = 1 << 20
	for _, tc := range []struct {
		name string
		size int64
		ok   bool
	}{
		{"empty", 0, true},
		{"exactly 4 MiB", 4 * mib, true},
		{"one byte over", 4*mib + 1, false},
		{"1 GiB", 1024 * mib, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(strings.ReplaceAll(tc.name, " ", "_"), tc.size)
			var data []byte
			var err error
			allocs := allocated(func() { data, err = Read(p) })
			assert.Less(t, allocs, uint64(32*mib), "reads at most 4 MiB + 1 byte, whatever the size")
			if tc.ok {
				require.NoError(t, err)
				assert.Len(t, data, int(tc.size))
				return
			}
			require.Error(t, err)
			assert.Equal(t, p+": larger than the limit of 4 MiB (4194304 bytes)", err.Error())
			var se *SizeError
			require.True(t, errors.As(err, &se))
			assert.Equal(t, &SizeError{File: p, Max: 4194304}, se)
		})
	}
	_, err := Read(filepath.Join(dir, "missing.toml"))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "got %v", err)
	var pe *fs.PathError
	assert.True(t, errors.As(err, &pe), "os's error, got %T", err)
	_, err = Read(dir)
	assert.Error(t, err, "a directory")
}

func TestCheckTOML(t *testing.T) {
	assert.NoError(t, CheckTOML("a.toml", []byte("[a]\nb = [1]\n"), 3))
	err := CheckTOML("a.toml", []byte("# x\n[a]\nb = [[1]]\n"), 3)
	require.Error(t, err)
	assert.Equal(t, "a.toml: line 3: nesting depth 4 exceeds the maximum of 3", err.Error())
	var de *DepthError
	require.True(t, errors.As(err, &de))
	assert.Equal(t, &DepthError{File: "a.toml", Line: 3, Depth: 4, Max: 3}, de)

	big := []byte("# " + strings.Repeat("x", MaxBytes) + "\n")
	err = CheckTOML("big.toml", big, 3)
	require.Error(t, err)
	assert.Equal(t, "big.toml: larger than the limit of 4 MiB (4194304 bytes)", err.Error())

	assert.Panics(t, func() { _ = CheckTOML("a.toml", nil, 0) })
}

func TestDecodeTOML(t *testing.T) {
	var v struct {
		A struct{ B []int } `toml:"a"`
	}
	md, err := DecodeTOML("a.toml", []byte("[a]\nb = [1, 2]\n"), 3, &v)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2}, v.A.B)
	assert.Empty(t, md.Undecoded())

	_, err = DecodeTOML("a.toml", []byte("[a]\nb = = 1\n"), 3, &v)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "a.toml: toml: line 2"), "got %v", err)
	var pe toml.ParseError
	assert.True(t, errors.As(err, &pe), "the decoder's error is wrapped, got %T", err)

	deep := "x = " + strings.Repeat("{a = ", 100000) + "1" + strings.Repeat("}", 100000) + "\n"
	var m map[string]any
	allocs := allocated(func() { _, err = DecodeTOML("deep.toml", []byte(deep), 5, &m) })
	require.Error(t, err)
	assert.Equal(t, "deep.toml: line 1: nesting depth 6 exceeds the maximum of 5", err.Error())
	assert.Less(t, allocs, uint64(4<<20), "the decoder does not see it")
}
