package cuda

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"unsafe"
)

// NVRTCMajor is the CUDA major release whose NVRTC the kernels are built and checked with (CUDA
// 13.0 on the lent machines): its soname is libnvrtc.so.13.
const NVRTCMajor = 13

// NVRTCSoname is the soname of the pinned NVRTC, looked up on the library path unless
// COLLPLAN_NVRTC names the library's file.
var NVRTCSoname = fmt.Sprintf("libnvrtc.so.%d", NVRTCMajor)

// ErrNoNVRTC is returned by OpenNVRTC when the library cannot be opened.
var ErrNoNVRTC = errors.New("no NVRTC")

// NVRTC is an opened libnvrtc.
type NVRTC struct {
	Path         string // the library's file
	Major, Minor int    // nvrtcVersion
	Include      []string

	version     func(major, minor *int32) int32
	errorString func(r int32) string
	create      func(prog *uintptr, src, name string, nHeaders int32, headers, names unsafe.Pointer) int32
	compile     func(prog uintptr, nOpts int32, opts unsafe.Pointer) int32
	destroy     func(prog *uintptr) int32
	logSize     func(prog uintptr, n *uint64) int32
	log         func(prog uintptr, b *byte) int32
	ptxSize     func(prog uintptr, n *uint64) int32
	ptx         func(prog uintptr, b *byte) int32
	cubinSize   func(prog uintptr, n *uint64) int32
	cubin       func(prog uintptr, b *byte) int32
}

// OpenNVRTC opens NVRTC: the file COLLPLAN_NVRTC names, else NVRTCSoname on the library path.
// It also loads libnvrtc-builtins from the same directory (NVRTC dlopens it by soname, which
// would otherwise need LD_LIBRARY_PATH), and finds CUDA's headers (cuda_fp16.h, ...): the
// directories COLLPLAN_CUDA_INCLUDE lists (separated by ':'), else ../include beside the
// library (a CUDA toolkit's lib64 or a PyPI wheel's lib).
func OpenNVRTC() (*NVRTC, error) {
	name := os.Getenv("COLLPLAN_NVRTC")
	if name == "" {
		name = NVRTCSoname
	}
	lib, err := dlopen(name)
	if err != nil {
		return nil, fmt.Errorf("%w (%s not found: install CUDA %d's NVRTC, e.g. pip install nvidia-cuda-nvrtc==13.0.88, and put its lib directory on LD_LIBRARY_PATH or its file in COLLPLAN_NVRTC): %v",
			ErrNoNVRTC, name, NVRTCMajor, err)
	}
	n := &NVRTC{Path: name}
	if err := bind(lib, name, map[string]any{
		"nvrtcVersion": &n.version, "nvrtcGetErrorString": &n.errorString,
		"nvrtcCreateProgram": &n.create, "nvrtcCompileProgram": &n.compile, "nvrtcDestroyProgram": &n.destroy,
		"nvrtcGetProgramLogSize": &n.logSize, "nvrtcGetProgramLog": &n.log,
		"nvrtcGetPTXSize": &n.ptxSize, "nvrtcGetPTX": &n.ptx,
		"nvrtcGetCUBINSize": &n.cubinSize, "nvrtcGetCUBIN": &n.cubin,
	}); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoNVRTC, err)
	}
	var major, minor int32
	if r := n.version(&major, &minor); r != 0 {
		return nil, fmt.Errorf("%w: nvrtcVersion: %s", ErrNoNVRTC, n.errorString(r))
	}
	n.Major, n.Minor = int(major), int(minor)
	if n.Major != NVRTCMajor {
		return nil, fmt.Errorf("%w: %s is NVRTC %d.%d, want major %d", ErrNoNVRTC, name, n.Major, n.Minor, NVRTCMajor)
	}
	if p := loadedPath("libnvrtc.so"); p != "" {
		n.Path = p
		builtins := filepath.Join(filepath.Dir(p), fmt.Sprintf("libnvrtc-builtins.so.%d.%d", n.Major, n.Minor))
		if _, err := os.Stat(builtins); err == nil {
			if _, err := dlopen(builtins); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrNoNVRTC, err)
			}
		}
	}
	if env := os.Getenv("COLLPLAN_CUDA_INCLUDE"); env != "" {
		n.Include = filepath.SplitList(env)
	} else if n.Path != "" {
		inc := filepath.Join(filepath.Dir(n.Path), "..", "include")
		if _, err := os.Stat(filepath.Join(inc, "cuda_fp16.h")); err == nil {
			n.Include = []string{filepath.Clean(inc)}
		}
	}
	return n, nil
}

// Version is "MAJOR.MINOR".
func (n *NVRTC) Version() string { return fmt.Sprintf("%d.%d", n.Major, n.Minor) }

var archRE = regexp.MustCompile(`^(compute|sm)_[0-9]{2,3}[af]?$`)

// CheckArch reports whether arch is an NVRTC architecture name: compute_NN (PTX only) or sm_NN
// and sm_NNa (PTX and cubin).
func CheckArch(arch string) error {
	if !archRE.MatchString(arch) {
		return fmt.Errorf("cuda: architecture %q: want compute_NN, sm_NN or sm_NNa (compute_80, compute_90, sm_90a)", arch)
	}
	return nil
}

// Output is what a compilation produced.
type Output struct {
	PTX   []byte // the PTX (without its trailing NUL)
	CUBIN []byte // the cubin, for sm_ architectures only
	Log   string // the compiler's log (warnings)
}

// CompileError is a compilation that failed: the compiler's log, which names the file and line
// of every error ("kernels.cu(12): error: ...").
type CompileError struct {
	Arch string
	Log  string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("cuda: NVRTC compile for %s failed:\n%s", e.Arch, strings.TrimSpace(e.Log))
}

// Compile compiles the translation unit main of files (names to contents; the others are
// offered as headers, found by #include "name") for arch, with options after the architecture
// and the include directories.
func (n *NVRTC) Compile(files map[string][]byte, main, arch string, options ...string) (*Output, error) {
	if err := CheckArch(arch); err != nil {
		return nil, err
	}
	src, ok := files[main]
	if !ok {
		return nil, fmt.Errorf("cuda: no source %q to compile", main)
	}
	var names []string
	for k := range files {
		if k != main {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var keep [][]byte
	cstr := func(s string) *byte {
		b := cString(s)
		keep = append(keep, b)
		return &b[0]
	}
	hdrs := make([]*byte, len(names)+1)
	hnames := make([]*byte, len(names)+1)
	for i, k := range names {
		hdrs[i], hnames[i] = cstr(string(files[k])), cstr(k)
	}
	var prog uintptr
	if r := n.create(&prog, string(src), main, int32(len(names)), unsafe.Pointer(&hdrs[0]), unsafe.Pointer(&hnames[0])); r != 0 {
		return nil, fmt.Errorf("cuda: nvrtcCreateProgram: %s", n.errorString(r))
	}
	defer n.destroy(&prog)
	opts := []string{"--gpu-architecture=" + arch, "-std=c++17"}
	for _, d := range n.Include {
		opts = append(opts, "-I"+d)
	}
	opts = append(opts, options...)
	optp := make([]*byte, len(opts))
	for i, o := range opts {
		optp[i] = cstr(o)
	}
	r := n.compile(prog, int32(len(opts)), unsafe.Pointer(&optp[0]))
	runtime.KeepAlive(keep)
	runtime.KeepAlive(hdrs)
	runtime.KeepAlive(hnames)
	runtime.KeepAlive(optp)
	out := &Output{Log: n.readLog(prog)}
	if r != 0 {
		return nil, &CompileError{Arch: arch, Log: out.Log}
	}
	var sz uint64
	if r := n.ptxSize(prog, &sz); r != 0 {
		return nil, fmt.Errorf("cuda: nvrtcGetPTXSize: %s", n.errorString(r))
	}
	if sz > 0 {
		b := make([]byte, sz)
		n.ptx(prog, &b[0])
		out.PTX = []byte(goString(b))
	}
	if strings.HasPrefix(arch, "sm_") {
		if r := n.cubinSize(prog, &sz); r != 0 {
			return nil, fmt.Errorf("cuda: nvrtcGetCUBINSize: %s", n.errorString(r))
		}
		if sz > 0 {
			out.CUBIN = make([]byte, sz)
			n.cubin(prog, &out.CUBIN[0])
		}
	}
	return out, nil
}

func (n *NVRTC) readLog(prog uintptr) string {
	var sz uint64
	if n.logSize(prog, &sz) != 0 || sz <= 1 {
		return ""
	}
	b := make([]byte, sz)
	n.log(prog, &b[0])
	return goString(b)
}

// SourceFiles returns the embedded device sources by name.
func SourceFiles() (map[string][]byte, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(Sources, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := Sources.ReadFile(p)
		files[p] = b
		return err
	})
	return files, err
}
