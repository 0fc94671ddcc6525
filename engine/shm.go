//go:build unix

package engine

import (
	"errors"
	"fmt"
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

// ShmDir is the directory of the shared-memory segments: /dev/shm, or os.TempDir() where there is
// no /dev/shm.
func ShmDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
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

// NewShmTransport returns a Transport over the segments of job jobID. With remove set, Close also
// removes the job's segment files (the owner's duty, when no launcher does it).
func NewShmTransport(jobID string, remove bool) (*ShmTransport, error) {
	if err := validJobID(jobID); err != nil {
		return nil, err
	}
	return &ShmTransport{dir: ShmDir(), prefix: ShmPrefix(jobID), removeOnEnd: remove, maps: make(map[string][]byte)}, nil
}

// shmPath returns the file of region name of job jobID.
func shmPath(dir, prefix, name string) string {
	return filepath.Join(dir, prefix+strings.ReplaceAll(name, "/", "."))
}

// Region maps region name: the file is created if absent (zero-filled by the kernel) and sized
// with an idempotent ftruncate, so no rank waits for another.
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

// mapFile maps size bytes of path MAP_SHARED, creating and sizing it when create is set.
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
	switch {
	case st.Size() == int64(size):
	case st.Size() == 0 && create:
		if err := f.Truncate(int64(size)); err != nil {
			return nil, fmt.Errorf("ftruncate %s: %w", path, err)
		}
		if st, err = f.Stat(); err != nil {
			return nil, err
		}
		if st.Size() != int64(size) {
			return nil, fmt.Errorf("%w: %s is %d bytes, want %d", ErrConfig, path, st.Size(), size)
		}
	default:
		return nil, fmt.Errorf("%w: %s is %d bytes, want %d", ErrConfig, path, st.Size(), size)
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
	return removeShm(ShmDir(), ShmPrefix(jobID))
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
	dir := ShmDir()
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
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
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
func AbortShm(jobID string, rank int) (bool, error) { return abortShm(jobID, rank, abortUser) }

// abortShm stores abortWord(rank, reason) in job jobID's abort word unless it is set.
func abortShm(jobID string, rank, reason int) (bool, error) {
	if err := validJobID(jobID); err != nil {
		return false, err
	}
	path := shmPath(ShmDir(), ShmPrefix(jobID), CtrlRegion)
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
	atomic.CompareAndSwapUint64(wordAt(b, CtrlAbortOffset), 0, abortWord(rank, reason))
	return true, nil
}

// abortWordShm reads job jobID's abort word (0 when not aborted or when the control region does
// not exist).
func abortWordShm(jobID string) (uint64, error) {
	path := shmPath(ShmDir(), ShmPrefix(jobID), CtrlRegion)
	st, err := os.Stat(path)
	if err != nil || st.Size() < CtrlAbortOffset+8 {
		return 0, nil
	}
	b, err := mapFile(path, int(st.Size()), false)
	if err != nil {
		return 0, err
	}
	defer syscall.Munmap(b)
	return atomic.LoadUint64(wordAt(b, CtrlAbortOffset)), nil
}
