package cuda

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The libraries are opened at run time with purego's dlopen (no cgo): a machine without CUDA
// builds and runs everything else, and the build needs neither CUDA's headers nor a C compiler.

// dlopen opens a shared library by path or soname, with its symbols global (libnvrtc then finds
// an already loaded libnvrtc-builtins by its soname).
func dlopen(name string) (uintptr, error) {
	return purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

// bind sets every function pointer of fns to the library's symbol of the same key, or fails
// naming the first symbol missing.
func bind(lib uintptr, libName string, fns map[string]any) error {
	for name, fp := range fns {
		sym, err := purego.Dlsym(lib, name)
		if err != nil {
			return fmt.Errorf("%s has no symbol %s: %v", libName, name, err)
		}
		purego.RegisterFunc(fp, sym)
	}
	return nil
}

// loadedPath returns the file a library whose base name starts with prefix was loaded from, read
// from /proc/self/maps ("" when it is not found there).
func loadedPath(prefix string) string {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 6 {
			continue
		}
		p := fields[len(fields)-1]
		if strings.HasPrefix(filepath.Base(p), prefix) {
			return p
		}
	}
	return ""
}

// cString returns s as a NUL-terminated byte slice.
func cString(s string) []byte { return append([]byte(s), 0) }

// goString reads the NUL-terminated C string at the start of b (all of b when it has no NUL).
func goString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// cStringAt reads the NUL-terminated C string at p (memory the library owns).
func cStringAt(p *byte) string {
	var b []byte
	for q := unsafe.Pointer(p); *(*byte)(q) != 0; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}
