package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openNVRTC opens NVRTC for a test, or skips it: unless COLLPLAN_REQUIRE_NVRTC=1 (set by .ci/run,
// which installs NVRTC from PyPI), where a missing NVRTC fails the test.
func openNVRTC(t *testing.T) *NVRTC {
	t.Helper()
	n, err := OpenNVRTC()
	if err == nil {
		return n
	}
	if os.Getenv("COLLPLAN_REQUIRE_NVRTC") == "1" {
		t.Fatalf("COLLPLAN_REQUIRE_NVRTC=1, but: %v", err)
	}
	t.Skipf("%v\nTo run it: .ci/run installs NVRTC and ptxas from PyPI into .cache/cuda-13.0 and runs this test with COLLPLAN_REQUIRE_NVRTC=1 (README, Tests and benchmarks)", err)
	return nil
}

// ptxasPath is COLLPLAN_PTXAS, else ptxas on PATH; required under COLLPLAN_REQUIRE_NVRTC=1.
func ptxasPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("COLLPLAN_PTXAS")
	if p == "" {
		var err error
		if p, err = exec.LookPath("ptxas"); err != nil {
			if os.Getenv("COLLPLAN_REQUIRE_NVRTC") == "1" {
				t.Fatalf("COLLPLAN_REQUIRE_NVRTC=1, but no ptxas (set COLLPLAN_PTXAS or PATH): %v", err)
			}
			t.Skip("no ptxas on PATH (set COLLPLAN_PTXAS)")
		}
	}
	return p
}

// TestCompileKernels compiles the device code with NVRTC for compute_80, compute_90 and sm_90a,
// has it assembled for sm_80, sm_90 and sm_90a (ptxas for the two compute_ PTX; for sm_90a the
// cubin NVRTC assembles itself, as a communicator on an H200 loads it: running ptxas on the same
// PTX again would cost a quarter of the test's CPU time for nothing new), and checks in the PTX
// that every
// kernel is there, that each LL kernel runs 16-byte volatile line stores (st.volatile.global.v4.u32,
// protocols.cuh's storeLL) and each LL128 kernel 16-byte volatile stores of two words
// (st.volatile.global.v2.u64), that each NVLS kernel (sm_90 and up only) runs multimem.ld_reduce
// and multimem.st, and that compute_80 has no NVLS kernel and no multimem instruction at all.
func TestCompileKernels(t *testing.T) {
	n := openNVRTC(t)
	ptxas := ptxasPath(t)
	files, err := SourceFiles()
	require.NoError(t, err)
	targets := []struct {
		arch, sm string // sm: ptxas's architecture, "" where NVRTC makes the cubin
		major    int
	}{
		{"compute_80", "sm_80", 8},
		{"compute_90", "sm_90", 9},
		{"sm_90a", "", 9},
	}
	outs := make([]*Output, len(targets))
	errs := make([]error, len(targets))
	asm := make([]error, len(targets))
	dir := t.TempDir()
	// Each target's ptxas starts as soon as its PTX is there, beside the other compilations.
	var wg sync.WaitGroup
	for i, tg := range targets {
		wg.Go(func() {
			start := time.Now()
			outs[i], errs[i] = n.Compile(files, MainSource, tg.arch)
			t.Logf("NVRTC %s %s: %.1f s", n.Version(), tg.arch, time.Since(start).Seconds())
			if errs[i] != nil || tg.sm == "" {
				return
			}
			ptxFile := filepath.Join(dir, tg.arch+".ptx")
			if asm[i] = os.WriteFile(ptxFile, outs[i].PTX, 0o644); asm[i] != nil {
				return
			}
			start = time.Now()
			out, err := exec.Command(ptxas, "-arch="+tg.sm, ptxFile, "-o", filepath.Join(dir, tg.sm+".cubin")).CombinedOutput()
			t.Logf("ptxas -arch=%s: %.1f s", tg.sm, time.Since(start).Seconds())
			if err != nil {
				asm[i] = fmt.Errorf("ptxas -arch=%s: %v\n%s", tg.sm, err, out)
			}
		})
	}
	wg.Wait()
	for i, tg := range targets {
		require.NoError(t, errs[i], "NVRTC %s", tg.arch)
	}
	for i, tg := range targets {
		t.Run(tg.arch, func(t *testing.T) {
			cubin := outs[i].CUBIN
			if tg.sm != "" {
				require.NoError(t, asm[i])
				var err error
				cubin, err = os.ReadFile(filepath.Join(dir, tg.sm+".cubin"))
				require.NoError(t, err)
			}
			assert.True(t, strings.HasPrefix(string(cubin), "\x7fELF"), "the %s cubin is an ELF file (%d bytes)", tg.arch, len(cubin))
			fns := ParsePTX(string(outs[i].PTX))
			entries := 0
			for _, f := range fns {
				if f.Entry {
					entries++
				}
			}
			names := KernelNames(tg.major)
			assert.Equal(t, len(names), entries, "entry points in the PTX")
			for _, k := range names {
				if !assert.Contains(t, fns, k) {
					continue
				}
				switch {
				case strings.HasSuffix(k, "_ll"):
					assert.True(t, Reaches(fns, k, "st.volatile.global.v4.u32"), "%s: no 16-byte volatile LL line store", k)
					assert.True(t, Reaches(fns, k, "ld.volatile.global.v4.u32"), "%s: no 16-byte volatile LL line load", k)
				case strings.HasSuffix(k, "_ll128"):
					assert.True(t, Reaches(fns, k, "st.volatile.global.v2.u64"), "%s: no 16-byte volatile LL128 store", k)
				case strings.HasPrefix(k, "cp_nvls_"):
					assert.True(t, Reaches(fns, k, "multimem.ld_reduce."), "%s: no multimem.ld_reduce", k)
					assert.True(t, Reaches(fns, k, "multimem.st."), "%s: no multimem.st", k)
				}
			}
			if tg.major < 9 {
				assert.NotContains(t, string(outs[i].PTX), "multimem.", "compute_80 has no multimem instructions")
			}
		})
	}
}

// TestCompileError: a source that does not compile is a *CompileError whose log names the file
// and line of the error, in the translation unit and in a header it includes.
func TestCompileError(t *testing.T) {
	n := openNVRTC(t)
	tests := []struct {
		name  string
		files map[string][]byte
		want  []string
	}{
		{"undeclared name", map[string][]byte{"broken.cu": []byte(
			"extern \"C\" __global__ void k(int* p) {\n  p[0] = 1;\n  p[1] = undeclared;\n}\n")},
			[]string{`broken.cu(3): error`, `"undeclared" is undefined`}},
		{"error in a header", map[string][]byte{
			"broken.cu": []byte("#include \"bad.cuh\"\nextern \"C\" __global__ void k(int* p) { p[0] = f(); }\n"),
			"bad.cuh":   []byte("#pragma once\n__device__ int f() { return 1 }\n")},
			[]string{`bad.cuh(2): error`, `expected a ";"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.Compile(tc.files, "broken.cu", "compute_80")
			var ce *CompileError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "compute_80", ce.Arch)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestCompileCached: the second compilation of the same sources for the same architecture comes
// from the cache; another architecture, or a changed source, is compiled again.
func TestCompileCached(t *testing.T) {
	n := openNVRTC(t)
	c := Cache{Dir: t.TempDir()}
	src := map[string][]byte{"k.cu": []byte("extern \"C\" __global__ void k(int* p) { p[0] = 1; }\n")}
	steps := []struct {
		arch    string
		src     string
		wantHit bool
	}{
		{"sm_90a", "", false},
		{"sm_90a", "", true},
		{"compute_80", "", false},
		{"compute_80", "", true},
		{"compute_80", "extern \"C\" __global__ void k(int* p) { p[0] = 2; }\n", false},
	}
	for i, s := range steps {
		if s.src != "" {
			src["k.cu"] = []byte(s.src)
		}
		out, hit, err := n.CompileCached(c, src, "k.cu", s.arch)
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, s.wantHit, hit, "step %d (%s)", i, s.arch)
		assert.Contains(t, string(out.PTX), ".entry k(", "step %d", i)
		assert.Equal(t, strings.HasPrefix(s.arch, "sm_"), len(out.CUBIN) > 0, "step %d: cubin", i)
	}
}
