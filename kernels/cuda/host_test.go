package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpenDriverMissing: without libcuda the error is ErrNoDriver, whose text is the one line the
// issue asks for. COLLPLAN_LIBCUDA points at a file that does not exist, so the test means the
// same on a machine with a driver.
func TestOpenDriverMissing(t *testing.T) {
	t.Setenv("COLLPLAN_LIBCUDA", filepath.Join(t.TempDir(), "libcuda.so.1"))
	d, err := OpenDriver()
	assert.Nil(t, d)
	require.ErrorIs(t, err, ErrNoDriver)
	assert.Equal(t, "no CUDA driver (libcuda.so.1 not found)", err.Error())
}

// TestOpenNVRTCMissing: a COLLPLAN_NVRTC that names no library is ErrNoNVRTC, naming the file and
// how to install NVRTC.
func TestOpenNVRTCMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libnvrtc.so.13")
	t.Setenv("COLLPLAN_NVRTC", missing)
	_, err := OpenNVRTC()
	require.ErrorIs(t, err, ErrNoNVRTC)
	assert.Contains(t, err.Error(), missing)
	assert.Contains(t, err.Error(), "nvidia-cuda-nvrtc==13.0.88")
}

func TestCheckArch(t *testing.T) {
	for _, tc := range []struct {
		arch string
		ok   bool
	}{
		{"compute_80", true}, {"compute_90", true}, {"sm_90a", true}, {"sm_100", true}, {"sm_80", true},
		{"", false}, {"sm90", false}, {"compute_9", false}, {"sm_90a;rm", false}, {"--gpu-architecture=sm_90", false},
	} {
		err := CheckArch(tc.arch)
		if tc.ok {
			assert.NoError(t, err, tc.arch)
		} else {
			assert.Error(t, err, tc.arch)
		}
	}
}

// TestCacheKey: the key changes with every input it is keyed by (a source's contents or name, the
// translation unit, the architecture, the NVRTC version, an option) and with nothing else.
func TestCacheKey(t *testing.T) {
	files := func() map[string][]byte {
		return map[string][]byte{"a.cu": []byte("A"), "b.cuh": []byte("B")}
	}
	base := CacheKey(files(), "a.cu", "sm_90a", "13.0", []string{"-I/x"})
	assert.True(t, strings.HasPrefix(base, "sm_90a-nvrtc13.0-"), base)
	assert.Equal(t, base, CacheKey(files(), "a.cu", "sm_90a", "13.0", []string{"-I/x"}), "same inputs")
	changed := map[string]string{}
	f := files()
	f["b.cuh"] = []byte("B2")
	changed["header contents"] = CacheKey(f, "a.cu", "sm_90a", "13.0", []string{"-I/x"})
	f = files()
	f["c.cuh"] = f["b.cuh"]
	delete(f, "b.cuh")
	changed["header name"] = CacheKey(f, "a.cu", "sm_90a", "13.0", []string{"-I/x"})
	f = files()
	f["a.cu"], f["b.cuh"] = []byte("AB"), []byte("") // the same bytes, cut elsewhere
	changed["boundary"] = CacheKey(f, "a.cu", "sm_90a", "13.0", []string{"-I/x"})
	changed["main"] = CacheKey(files(), "b.cuh", "sm_90a", "13.0", []string{"-I/x"})
	changed["arch"] = CacheKey(files(), "a.cu", "compute_90", "13.0", []string{"-I/x"})
	changed["version"] = CacheKey(files(), "a.cu", "sm_90a", "13.1", []string{"-I/x"})
	changed["option"] = CacheKey(files(), "a.cu", "sm_90a", "13.0", []string{"-I/y"})
	for what, k := range changed {
		assert.NotEqual(t, base, k, what)
	}
}

// TestCacheStoreLoad: an entry comes back as stored; an sm_ entry without its cubin is a miss.
func TestCacheStoreLoad(t *testing.T) {
	c := Cache{Dir: filepath.Join(t.TempDir(), "nested", "cache")}
	_, ok := c.Load("k", false)
	assert.False(t, ok, "empty cache")
	require.NoError(t, c.Store("k", &Output{PTX: []byte(".version 9.0"), CUBIN: []byte("\x7fELF")}))
	out, ok := c.Load("k", true)
	require.True(t, ok)
	assert.Equal(t, ".version 9.0", string(out.PTX))
	assert.Equal(t, "\x7fELF", string(out.CUBIN))
	require.NoError(t, c.Store("p", &Output{PTX: []byte("ptx only")}))
	_, ok = c.Load("p", true)
	assert.False(t, ok, "an sm_ load needs the cubin")
	out, ok = c.Load("p", false)
	require.True(t, ok)
	assert.Equal(t, "ptx only", string(out.PTX))
	entries, err := os.ReadDir(c.Dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.NotContains(t, e.Name(), ".tmp", "no temporary file left")
	}
}

// TestDefaultCacheDir: COLLPLAN_CACHE_DIR wins; else collplan/nvrtc under XDG_CACHE_HOME.
func TestDefaultCacheDir(t *testing.T) {
	t.Setenv("COLLPLAN_CACHE_DIR", "/tmp/cp-cache")
	d, err := DefaultCacheDir()
	require.NoError(t, err)
	assert.Equal(t, "/tmp/cp-cache", d)
	t.Setenv("COLLPLAN_CACHE_DIR", "")
	t.Setenv("XDG_CACHE_HOME", "/tmp/xdg")
	d, err = DefaultCacheDir()
	require.NoError(t, err)
	assert.Equal(t, "/tmp/xdg/collplan/nvrtc", d)
}

// TestParsePTX: definitions, not declarations; calls across lines; bodies whose inline asm
// puts braces at column 0; Reaches follows calls.
func TestParsePTX(t *testing.T) {
	ptx := `.version 9.0
.func  (.param .b32 func_retval0) helper
(
	.param .b64 helper_param_0
)
;
.visible .entry k_ll(
	.param .u64 k_ll_param_0
)
{
	.reg .b32 %r<3>;
	{ // callseq 0, 0
	call.uni (retval0), 
	helper, 
	(
	param0
	);
	} // callseq 0
	ret;
}
.visible .entry k_plain(
	.param .u64 k_plain_param_0
)
{
	ret;
}
.func  (.param .b32 func_retval0) helper(
	.param .b64 helper_param_0
)
{
{
.reg .b16 low;
}
	st.volatile.global.v4.u32 	[%rd1], {%r1, %r2, %r3, %r4};
	ret;
}
`
	fns := ParsePTX(ptx)
	require.Len(t, fns, 3)
	assert.True(t, fns["k_ll"].Entry)
	assert.False(t, fns["helper"].Entry)
	assert.Equal(t, []string{"helper"}, fns["k_ll"].Calls)
	assert.Contains(t, fns["helper"].Body, "st.volatile.global.v4.u32")
	assert.True(t, Reaches(fns, "k_ll", "st.volatile.global.v4.u32"))
	assert.False(t, Reaches(fns, "k_plain", "st.volatile.global.v4.u32"))
	assert.False(t, Reaches(fns, "missing", "ret;"))
}

// TestKernelNames: 12 dtypes x 3 protocols x 4 reduction kernels, 4 sizes x 3 protocols x 2
// copy kernels, and from sm_90 8 NVLS kernels; no name twice.
func TestKernelNames(t *testing.T) {
	for _, tc := range []struct{ major, want int }{{8, 12*3*4 + 4*3*2}, {9, 12*3*4 + 4*3*2 + 8}, {10, 12*3*4 + 4*3*2 + 8}} {
		names := KernelNames(tc.major)
		assert.Len(t, names, tc.want, "sm_%d0", tc.major)
		seen := map[string]bool{}
		for _, n := range names {
			assert.False(t, seen[n], n)
			seen[n] = true
		}
	}
	assert.Contains(t, KernelNames(9), "cp_nvls_allreduce_bfloat16_simple")
	assert.Contains(t, KernelNames(8), "cp_ring_allreduce_fp8e4m3_ll128")
	assert.NotContains(t, KernelNames(8), "cp_nvls_allreduce_float32_simple")
}
