package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Cache is an on-disk cache of compiled kernels in Dir: KEY.ptx, and KEY.cubin for sm_
// architectures, where the key names the architecture and the NVRTC version and hashes the
// sources and the options (CacheKey). Entries are written to a temporary file and renamed, so a
// reader never sees half of one.
type Cache struct {
	Dir string
}

// DefaultCacheDir is COLLPLAN_CACHE_DIR when set, else collplan/nvrtc in the user's cache
// directory ($XDG_CACHE_HOME, else ~/.cache).
func DefaultCacheDir() (string, error) {
	if d := os.Getenv("COLLPLAN_CACHE_DIR"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cuda: no cache directory (set COLLPLAN_CACHE_DIR): %w", err)
	}
	return filepath.Join(d, "collplan", "nvrtc"), nil
}

// CacheKey is ARCH-nvrtcVERSION-HASH, HASH the first 32 hex digits of the SHA-256 of the
// sources (names and contents, in name order), the translation unit's name and the options.
func CacheKey(files map[string][]byte, main, arch, nvrtcVersion string, options []string) string {
	h := sha256.New()
	names := make([]string, 0, len(files))
	for k := range files {
		names = append(names, k)
	}
	sort.Strings(names)
	field := func(b []byte) {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	for _, k := range names {
		field([]byte(k))
		field(files[k])
	}
	field([]byte(main))
	for _, o := range options {
		field([]byte(o))
	}
	return arch + "-nvrtc" + nvrtcVersion + "-" + hex.EncodeToString(h.Sum(nil))[:32]
}

// Load returns the entry key, or false when there is none (or it lacks the cubin an sm_
// architecture needs).
func (c Cache) Load(key string, wantCubin bool) (*Output, bool) {
	ptx, err := os.ReadFile(filepath.Join(c.Dir, key+".ptx"))
	if err != nil {
		return nil, false
	}
	out := &Output{PTX: ptx}
	if wantCubin {
		if out.CUBIN, err = os.ReadFile(filepath.Join(c.Dir, key+".cubin")); err != nil || len(out.CUBIN) == 0 {
			return nil, false
		}
	}
	return out, true
}

// Store writes out as entry key (the cubin first, so that a PTX file means a whole entry).
func (c Cache) Store(key string, out *Output) error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("cuda: cache: %w", err)
	}
	if len(out.CUBIN) > 0 {
		if err := writeAtomic(filepath.Join(c.Dir, key+".cubin"), out.CUBIN); err != nil {
			return err
		}
	}
	return writeAtomic(filepath.Join(c.Dir, key+".ptx"), out.PTX)
}

func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("cuda: cache: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("cuda: cache: %w", err)
	}
	return nil
}

// CompileCached returns the cached compilation of main for arch when the cache has it, else
// compiles and stores it; hit says which. A cache that cannot be written is no error: the
// compilation is returned all the same.
func (n *NVRTC) CompileCached(c Cache, files map[string][]byte, main, arch string, options ...string) (out *Output, hit bool, err error) {
	if err := CheckArch(arch); err != nil {
		return nil, false, err
	}
	key := CacheKey(files, main, arch, n.Version(), append(append([]string(nil), n.Include...), options...))
	wantCubin := arch[:3] == "sm_"
	if out, ok := c.Load(key, wantCubin); ok {
		return out, true, nil
	}
	out, err = n.Compile(files, main, arch, options...)
	if err != nil {
		return nil, false, err
	}
	if serr := c.Store(key, out); serr != nil && !errors.Is(serr, fs.ErrPermission) {
		out.Log += "\n" + serr.Error()
	}
	return out, false, nil
}
