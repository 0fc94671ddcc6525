//go:build unix

package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Shared-memory segments are files named ShmPrefix(jobID)+region name (with '/' turned into '.')
// in ShmDir. A job id is "<owner pid>.<random hex>": the owner (the launcher, or rank 0 when the
// ranks were started by something else) removes the job's files when it ends, and
// RemoveStaleShm removes the files of any job whose owner process no longer exists.

// EnvShmDir names a directory that replaces /dev/shm as the home of the segments (COLLPLAN_SHM_DIR):
// an absolute path to an existing directory, the same for every process of a job (a launcher checks
// that its ranks get its own). Give it a tmpfs that holds the job's regions when /dev/shm is small
// (Docker gives a container 64 MiB unless --shm-size says more).
const EnvShmDir = "COLLPLAN_SHM_DIR"

// ShmDir is the directory of the shared-memory segments: COLLPLAN_SHM_DIR when set (whether or not
// it is valid: the transport and RemoveStaleShm check it), else /dev/shm, or
// os.TempDir() where there is no /dev/shm.
func ShmDir() string {
	if d := os.Getenv(EnvShmDir); d != "" {
		return d
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// shmDir returns ShmDir, or an error naming COLLPLAN_SHM_DIR when it is not an absolute path to a
// directory. Relative paths are refused because ranks started by hand may not share a working
// directory, and ranks in different directories would never meet.
func shmDir() (string, error) {
	d := os.Getenv(EnvShmDir)
	if d == "" {
		return ShmDir(), nil
	}
	if !filepath.IsAbs(d) {
		return "", fmt.Errorf("%w: %s=%q: not an absolute path", ErrInvalid, EnvShmDir, d)
	}
	st, err := os.Stat(d)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("%w: %s=%q: %v", ErrInvalid, EnvShmDir, d, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%w: %s=%q: not a directory", ErrInvalid, EnvShmDir, d)
	}
	return d, nil
}

// shmDirEnv returns env, the environment of ranks a launcher starts, with this process's segment
// directory: the launcher's lock and cleanup must be where its ranks make their segments. env gets
// this process's COLLPLAN_SHM_DIR when it has none; one that differs is an error.
func shmDirEnv(env []string) ([]string, error) {
	if _, err := shmDir(); err != nil {
		return nil, err
	}
	ours := os.Getenv(EnvShmDir)
	theirs, set := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvShmDir+"="); ok {
			theirs, set = v, true // the last one wins, as in os/exec
		}
	}
	switch {
	case !set && ours != "":
		return append(append([]string(nil), env...), EnvShmDir+"="+ours), nil
	case theirs != ours:
		return nil, fmt.Errorf("%w: the ranks' environment has %s=%q, this process %q: a launcher and its ranks must share the segment directory",
			ErrInvalid, EnvShmDir, theirs, ours)
	}
	return env, nil
}

// ShmPrefix is the file name prefix of job jobID's segments: "collplan-<jobid>-".
func ShmPrefix(jobID string) string { return "collplan-" + jobID + "-" }

// processAlive reports whether process pid exists (signal 0 succeeds or is refused for
// permission).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// ShmTransport is one rank's Transport over shared-memory files: every rank (process) that makes
// one with the same job id gets the same MAP_SHARED mappings.
type ShmTransport struct {
	dir, prefix string
	removeOnEnd bool

	mu     sync.Mutex
	maps   map[string][]byte
	closed bool
}

// NewShmTransport returns a Transport over the segments of job jobID in ShmDir (checked). With
// remove set, Close also removes the job's segment files (the owner's duty, when no launcher does
// it).
func NewShmTransport(jobID string, remove bool) (*ShmTransport, error) {
	if err := validJobID(jobID); err != nil {
		return nil, err
	}
	dir, err := shmDir()
	if err != nil {
		return nil, err
	}
	return &ShmTransport{dir: dir, prefix: ShmPrefix(jobID), removeOnEnd: remove, maps: make(map[string][]byte)}, nil
}

// shmPath returns the file of region name of job jobID.
func shmPath(dir, prefix, name string) string {
	return filepath.Join(dir, prefix+strings.ReplaceAll(name, "/", "."))
}

// Region maps region name: the file is created if absent (zero-filled by the kernel), and every
// rank allocates its whole size (allocate: idempotent, so no rank waits for another, and a
// directory without room is an error naming the region, not SIGBUS at the first touch).
func (t *ShmTransport) Region(name string, size int) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("engine: shm region %s: size %d", name, size)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("engine: shm region %s: %w", name, ErrClosed)
	}
	if r, ok := t.maps[name]; ok {
		if len(r) != size {
			return nil, fmt.Errorf("engine: shm region %s: asked for %d bytes, it has %d", name, size, len(r))
		}
		return r, nil
	}
	r, err := mapFile(shmPath(t.dir, t.prefix, name), size, true)
	if err != nil {
		return nil, fmt.Errorf("engine: shm region %s: %w", name, err)
	}
	t.maps[name] = r
	return r, nil
}

// mapFile maps size bytes of path MAP_SHARED, creating and allocating it when create is set.
func mapFile(path string, size int, create bool) ([]byte, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// Size 0: just created (here or by a rank whose allocation has not finished, which then
	// serializes with ours); any other size but ours: another configuration.
	if st.Size() != int64(size) && (st.Size() != 0 || !create) {
		return nil, fmt.Errorf("%w: %s is %d bytes, want %d", ErrConfig, path, st.Size(), size)
	}
	if create {
		if err := allocate(f, filepath.Dir(path), size); err != nil {
			return nil, err
		}
		if st, err = f.Stat(); err != nil {
			return nil, err
		}
		if st.Size() != int64(size) {
			return nil, fmt.Errorf("%w: %s is %d bytes, want %d", ErrConfig, path, st.Size(), size)
		}
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%RegionAlign != 0 {
		syscall.Munmap(b)
		return nil, fmt.Errorf("mmap %s: not aligned to %d bytes", path, RegionAlign)
	}
	return b, nil
}

// noSpaceError says that dir cannot hold a region of size bytes, and how much it has.
func noSpaceError(dir string, size int, err error) error {
	free := "an unknown amount"
	if n, ok := freeBytes(dir); ok {
		free = fmtBytes(n)
	}
	return fmt.Errorf("%s has %s free, the region needs %s (set %s to a larger tmpfs): %w",
		dir, free, fmtBytes(int64(size)), EnvShmDir, err)
}

// fmtBytes writes n in B, KiB, MiB or GiB with one decimal.
func fmtBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// Close unmaps every region (and removes the job's files when the transport was made with
// remove set). It is idempotent.
func (t *ShmTransport) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	var errs []error
	for name, r := range t.maps {
		if err := syscall.Munmap(r); err != nil {
			errs = append(errs, fmt.Errorf("engine: munmap %s: %w", name, err))
		}
	}
	t.maps = nil
	if t.removeOnEnd {
		if _, err := removeShm(t.dir, t.prefix); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RemoveShm removes every segment file of job jobID and returns how many it removed.
func RemoveShm(jobID string) (int, error) {
	if err := validJobID(jobID); err != nil {
		return 0, err
	}
	dir, err := shmDir()
	if err != nil {
		return 0, err
	}
	return removeShm(dir, ShmPrefix(jobID))
}

func removeShm(dir, prefix string) (int, error) {
	files, err := filepath.Glob(filepath.Join(dir, prefix+"*"))
	if err != nil {
		return 0, fmt.Errorf("engine: listing %s: %w", dir, err)
	}
	var errs []error
	n := 0
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("engine: removing %s: %w", f, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// ShmFiles returns the segment files of job jobID that exist now.
func ShmFiles(jobID string) []string {
	files, _ := filepath.Glob(filepath.Join(ShmDir(), ShmPrefix(jobID)+"*"))
	return files
}

// RemoveStaleShm removes the segment files left by crashed jobs: those whose job id names an owner
// process that no longer exists. It returns the files it removed.
func RemoveStaleShm() ([]string, error) {
	dir, err := shmDir()
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "collplan-*"))
	if err != nil {
		return nil, fmt.Errorf("engine: listing %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, f := range files {
		rest := strings.TrimPrefix(filepath.Base(f), "collplan-")
		job, _, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		pid, ok := jobOwner(job)
		if !ok || processAlive(pid) {
			continue
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("engine: removing stale %s: %w", f, err))
			continue
		}
		removed = append(removed, f)
	}
	return removed, errors.Join(errs...)
}

// AbortShm aborts job jobID's communicator on behalf of rank (a launcher's duty when rank's
// process died): it stores AbortWord(rank) in the control region's abort word unless the
// communicator is already aborted. It reports false when the control region does not exist yet.
func AbortShm(jobID string, rank int) (bool, error) {
	if err := validJobID(jobID); err != nil {
		return false, err
	}
	dir, err := shmDir()
	if err != nil {
		return false, err
	}
	path := shmPath(dir, ShmPrefix(jobID), CtrlRegion)
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && st.Size() < CtrlAbortOffset+8) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("engine: abort job %s: %w", jobID, err)
	}
	b, err := mapFile(path, int(st.Size()), false)
	if err != nil {
		return false, fmt.Errorf("engine: abort job %s: %w", jobID, err)
	}
	defer syscall.Munmap(b)
	atomic.CompareAndSwapUint64(wordAt(b, CtrlAbortOffset), 0, AbortWord(rank))
	return true, nil
}
