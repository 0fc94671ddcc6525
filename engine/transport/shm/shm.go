//go:build unix

package shm

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/internal/bytesize"
)

// Shared-memory segments are files named ShmPrefix(jobID)+region name (with '/' turned into '.')
// in ShmDir, beside the job's lock file, ShmPrefix(jobID)+"lock", whose holders keep them (see
// JobLock for the protocol).

// EnvShmDir names a directory that replaces /dev/shm as the home of the segments (COLLPLAN_SHM_DIR):
// an absolute path to an existing directory, the same for every process of a job (a launcher checks
// that its ranks get its own). Give it a tmpfs that holds the job's regions when /dev/shm is small
// (Docker gives a container 64 MiB unless --shm-size says more).
const EnvShmDir = "COLLPLAN_SHM_DIR"

// ShmDir is the directory of the shared-memory segments: COLLPLAN_SHM_DIR when set (whether or not
// it is valid: the transport, CreateJobLock and RemoveStaleShm check it), else /dev/shm, or
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
// directory, and ranks in different directories would not find the job's lock and segments.
func shmDir() (string, error) {
	d := os.Getenv(EnvShmDir)
	if d == "" {
		return ShmDir(), nil
	}
	if !filepath.IsAbs(d) {
		return "", fmt.Errorf("%w: %s=%q: not an absolute path", wire.ErrInvalid, EnvShmDir, d)
	}
	st, err := os.Stat(d)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("%w: %s=%q: %v", wire.ErrInvalid, EnvShmDir, d, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%w: %s=%q: not a directory", wire.ErrInvalid, EnvShmDir, d)
	}
	return d, nil
}

// ShmDirEnv returns env, the environment of ranks a launcher starts, with this process's segment
// directory: the launcher's lock and cleanup must be where its ranks make their segments. env gets
// this process's COLLPLAN_SHM_DIR when it has none; one that differs is an error.
func ShmDirEnv(env []string) ([]string, error) {
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
			wire.ErrInvalid, EnvShmDir, theirs, ours)
	}
	return env, nil
}

// ShmPrefix is the file name prefix of job jobID's segments: "collplan-<jobid>-".
func ShmPrefix(jobID string) string { return "collplan-" + jobID + "-" }

// lockName is the suffix of a job's lock file; Region refuses it as a region name.
const lockName = "lock"

func lockPath(dir, job string) string { return filepath.Join(dir, ShmPrefix(job)+lockName) }

// flock is syscall.Flock, retried when a signal interrupts it.
func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}

func wouldBlock(err error) bool {
	return errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EAGAIN)
}

// sameFile reports whether path still names the file f has open.
func sameFile(f *os.File, path string) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	pi, err := os.Stat(path)
	return err == nil && os.SameFile(fi, pi)
}

// JobLock is a process's shared hold on a job's lock file, ShmPrefix(job)+"lock" in ShmDir; the
// job's files live as long as some process holds it:
//
//   - The job's owner (a Launcher, or rank 0 of a job started by hand) creates the lock with
//     CreateJobLock before any other process can know the job id, and every process of the job
//     (the owner, each rank's ShmTransport) holds flock(LOCK_SH) on it for as long as it uses the
//     job. The kernel drops a process's flock when the process dies, however it dies, and a flock
//     is seen from every PID namespace that sees the file, unlike a pid: an earlier version judged
//     a job by its owner's pid, which from another PID namespace (a container) names no process,
//     or an unrelated one, and so deleted the segments of live jobs run in containers.
//   - A job is stale when nobody holds its lock (flock(LOCK_EX|LOCK_NB) succeeds) or it has no
//     lock file (segments are made only under a held lock, and a lock is removed only while nobody
//     else holds it, so segments without one belong to a job that has ended). RemoveStaleShm
//     removes stale jobs' files, holding the exclusive lock while it does.
//   - The last one out cleans up: a process that lets go of a job (JobLock.Close,
//     ShmTransport.Close) drops its shared lock and then tries for the exclusive one without
//     waiting; whoever gets it removes the job's files. Dropping first makes this race-free: of
//     processes letting go at the same moment, the last to drop finds no other holder, or one that
//     already has the exclusive lock and cleans. (Converting the shared lock in place is not
//     enough where a failed conversion keeps the shared lock: two holders could each fail while
//     the other still held. Linux drops it first, but flock(2) does not promise either.) So a job
//     whose rank 0 was killed with SIGKILL is removed by its last rank to close, and a job whose
//     processes were all killed, by the next RemoveStaleShm.
//
// Go opens files close-on-exec, so the processes a holder starts (a launcher's ranks) do not
// inherit its hold. Job ids must not be reused (NewJobID's are random): the lock is found by name.
type JobLock struct {
	job, dir string
	mu       sync.Mutex
	f        *os.File // nil once closed
}

// CreateJobLock creates job's lock file and holds it, making this process the job's owner: a
// Launcher does it before it starts the ranks, and rank 0 of a job started by hand before the
// rendezvous hands the id to its peers (whose NewShmTransport needs the lock to exist). The file
// is never seen unlocked: it is made under a temporary name, locked, then linked into place, which
// also fails if the job id is in use. Close it when the job ends (after the transports, or before:
// the last one out removes the job's files).
func CreateJobLock(job string) (*JobLock, error) {
	if err := transport.ValidJobID(job); err != nil {
		return nil, err
	}
	dir, err := shmDir()
	if err != nil {
		return nil, err
	}
	path := lockPath(dir, job)
	// A RemoveStaleShm can remove the temporary file between its creation and its flock (it looks
	// abandoned then); try again under another name. Eight tries: each loses only to a cleanup that
	// ran in a window of two system calls.
	var last error
	for range 8 {
		var b [4]byte
		rand.Read(b[:])
		tmp := filepath.Join(dir, "."+ShmPrefix(job)+lockName+"-"+hex.EncodeToString(b[:]))
		f, err := os.OpenFile(tmp, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("engine: job %s: creating its lock: %w", job, err)
		}
		if err := flock(f, syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
			f.Close()
			if !wouldBlock(err) {
				os.Remove(tmp)
				return nil, fmt.Errorf("engine: job %s: locking %s: %w", job, tmp, err)
			}
			last = err
			continue // a cleanup holds it and will remove it
		}
		err = os.Link(tmp, path)
		os.Remove(tmp)
		switch {
		case err == nil:
			return &JobLock{job: job, dir: dir, f: f}, nil
		case errors.Is(err, fs.ErrNotExist):
			f.Close()
			last = err
			continue // removed by a cleanup before the link
		case errors.Is(err, fs.ErrExist):
			f.Close()
			return nil, fmt.Errorf("engine: job %s: its lock %s exists: the job id is in use", job, path)
		default:
			f.Close()
			return nil, fmt.Errorf("engine: job %s: creating its lock: %w", job, err)
		}
	}
	return nil, fmt.Errorf("engine: job %s: creating its lock in %s: lost to cleanups 8 times: %w", job, dir, last)
}

// openJobLock opens job's existing lock file and takes a shared lock on it.
func openJobLock(dir, job string) (*os.File, error) {
	path := lockPath(dir, job)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: job %s: no lock file %s: the job's owner (a Launcher, or rank 0 through CreateJobLock) has not created it, or the job has ended",
			wire.ErrConfig, job, path)
	}
	if err != nil {
		return nil, fmt.Errorf("engine: job %s: %w", job, err)
	}
	err = flock(f, syscall.LOCK_SH|syscall.LOCK_NB)
	if err == nil && !sameFile(f, path) {
		err = syscall.ESTALE // removed since we opened it
	}
	if err != nil {
		f.Close()
		if wouldBlock(err) || err == syscall.ESTALE {
			// Only a cleanup holds the exclusive lock, and only once no process of the job holds it.
			return nil, fmt.Errorf("%w: job %s has ended (its lock %s is being removed)", wire.ErrConfig, job, path)
		}
		return nil, fmt.Errorf("engine: job %s: locking %s: %w", job, path, err)
	}
	return f, nil
}

// Job returns the job id.
func (l *JobLock) Job() string { return l.job }

// Close lets go of the job; when no other process holds it any more, Close removes the job's
// files. It is idempotent.
func (l *JobLock) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	_, err := letGo(l.dir, l.job, f)
	return err
}

// letGo drops f's shared lock on job's lock file, then, if it can have the exclusive lock at once
// (nobody else holds the job), removes the job's files; it closes f.
func letGo(dir, job string, f *os.File) ([]string, error) {
	defer f.Close()
	if err := flock(f, syscall.LOCK_UN); err != nil {
		return nil, fmt.Errorf("engine: job %s: unlocking %s: %w", job, f.Name(), err)
	}
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if wouldBlock(err) {
			return nil, nil // another process holds the job: the last one removes the files
		}
		return nil, fmt.Errorf("engine: job %s: locking %s: %w", job, f.Name(), err)
	}
	return removeJob(dir, job, f)
}

// removeJob removes job's files, its segments first and its lock last, with f holding the
// exclusive lock (so a cleaner that dies on the way leaves a lock nobody holds: stale).
func removeJob(dir, job string, f *os.File) ([]string, error) {
	path := lockPath(dir, job)
	if !sameFile(f, path) {
		return nil, nil // another cleaner has removed the job already
	}
	removed, err := removeShm(dir, ShmPrefix(job), path)
	if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		err = errors.Join(err, fmt.Errorf("engine: removing %s: %w", path, rerr))
	} else if rerr == nil {
		removed = append(removed, path)
	}
	return removed, err
}

// ShmTransport is one rank's Transport over shared-memory files: every rank (process) that makes
// one with the same job id gets the same MAP_SHARED mappings.
type ShmTransport struct {
	dir, job, prefix string
	lock             *os.File // the shared lock that keeps the job's files, dropped at Close

	mu       sync.Mutex
	maps     map[string][]byte
	closed   bool
	abandons bool // Close removes the job's files whoever else holds it (Abandon)
}

// Abandon makes Close remove the job's files even while other processes still hold the job: for
// a rank of an aborted communicator that no launcher watches (a launcher reads the abort word,
// then removes the files itself), since nobody will use them again and a peer that stopped
// (SIGSTOP) would otherwise keep them for as long as it lives. The mappings stay valid; only the
// names go.
func (t *ShmTransport) Abandon() {
	t.mu.Lock()
	t.abandons = true
	t.mu.Unlock()
}

// NewShmTransport returns a Transport over the segments of job jobID, holding the job's lock
// (which must exist: see CreateJobLock) until Close. The directory is ShmDir, checked.
func NewShmTransport(jobID string) (*ShmTransport, error) {
	if err := transport.ValidJobID(jobID); err != nil {
		return nil, err
	}
	dir, err := shmDir()
	if err != nil {
		return nil, err
	}
	f, err := openJobLock(dir, jobID)
	if err != nil {
		return nil, err
	}
	return &ShmTransport{dir: dir, job: jobID, prefix: ShmPrefix(jobID), lock: f, maps: make(map[string][]byte)}, nil
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
	if name == lockName {
		return nil, fmt.Errorf("%w: shm region %q: the name of the job's lock file", wire.ErrInvalid, name)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("engine: shm region %s: %w", name, wire.ErrClosed)
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
		return nil, fmt.Errorf("%w: %s is %d bytes, want %d", wire.ErrConfig, path, st.Size(), size)
	}
	if create {
		if err := allocate(f, filepath.Dir(path), size); err != nil {
			return nil, err
		}
		if st, err = f.Stat(); err != nil {
			return nil, err
		}
		if st.Size() != int64(size) {
			return nil, fmt.Errorf("%w: %s is %d bytes, want %d", wire.ErrConfig, path, st.Size(), size)
		}
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%wire.RegionAlign != 0 {
		syscall.Munmap(b)
		return nil, fmt.Errorf("mmap %s: not aligned to %d bytes", path, wire.RegionAlign)
	}
	return b, nil
}

// noSpaceError says that dir cannot hold a region of size bytes, and how much it has.
func noSpaceError(dir string, size int, err error) error {
	free := "an unknown amount"
	if n, ok := freeBytes(dir); ok {
		free = bytesize.Approx(n)
	}
	return fmt.Errorf("%s has %s free, the region needs %s (set %s to a larger tmpfs): %w",
		dir, free, bytesize.Approx(int64(size)), EnvShmDir, err)
}

// Close unmaps every region and lets go of the job (the last process of the job to let go removes
// its files). It is idempotent.
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
	if t.abandons {
		if _, err := RemoveShm(t.job); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := letGo(t.dir, t.job, t.lock); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RemoveShm removes every file of job jobID (its segments, then its lock), whether or not a
// process still uses it, and returns how many it removed. RemoveStaleShm and the last process
// of a job remove a job's files safely; this is for a job known to be over.
func RemoveShm(jobID string) (int, error) {
	if err := transport.ValidJobID(jobID); err != nil {
		return 0, err
	}
	dir, err := shmDir()
	if err != nil {
		return 0, err
	}
	lock := lockPath(dir, jobID)
	removed, err := removeShm(dir, ShmPrefix(jobID), lock)
	n := len(removed)
	if rerr := os.Remove(lock); rerr == nil {
		n++
	} else if !errors.Is(rerr, fs.ErrNotExist) {
		err = errors.Join(err, fmt.Errorf("engine: removing %s: %w", lock, rerr))
	}
	return n, err
}

// removeShm removes the files of dir whose names start with prefix, except the file except, and
// returns those it removed.
func removeShm(dir, prefix, except string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, prefix+"*"))
	if err != nil {
		return nil, fmt.Errorf("engine: listing %s: %w", dir, err)
	}
	var errs []error
	var removed []string
	for _, f := range files {
		if f == except {
			continue
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("engine: removing %s: %w", f, err))
			continue
		}
		removed = append(removed, f)
	}
	return removed, errors.Join(errs...)
}

// ShmFiles returns the files of job jobID (segments and lock) that exist now.
func ShmFiles(jobID string) []string {
	files, _ := filepath.Glob(filepath.Join(ShmDir(), ShmPrefix(jobID)+"*"))
	return files
}

// RemoveStaleShm removes the files of jobs that have ended without removing them (every process
// killed, a launcher killed with its ranks): those whose lock file no process holds, or that have
// no lock file, and the temporary files of locks whose creator died before putting them in place.
// A job some process holds is never touched, whatever PID namespace that process runs in. It
// returns the files it removed.
func RemoveStaleShm() ([]string, error) {
	dir, err := shmDir()
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "collplan-*"))
	if err != nil {
		return nil, fmt.Errorf("engine: listing %s: %w", dir, err)
	}
	jobs := make(map[string][]string)
	for _, f := range files {
		job, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(f), "collplan-"), "-")
		if ok && transport.ValidJobID(job) == nil {
			jobs[job] = append(jobs[job], f)
		}
	}
	ids := make([]string, 0, len(jobs))
	for job := range jobs {
		ids = append(ids, job)
	}
	sort.Strings(ids)
	var removed []string
	var errs []error
	for _, job := range ids {
		r, err := removeIfStale(dir, job, jobs[job])
		removed = append(removed, r...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	tmps, _ := filepath.Glob(filepath.Join(dir, ".collplan-*-"+lockName+"-*"))
	for _, tmp := range tmps {
		if ok, err := removeIfFree(tmp); ok {
			removed = append(removed, tmp)
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// removeIfStale removes job's files if the job is stale; seen are the files listed for it.
func removeIfStale(dir, job string, seen []string) ([]string, error) {
	path := lockPath(dir, job)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		// No lock: the job has ended (its segments were made under a lock, and a lock is removed
		// only when no process holds it).
		var removed []string
		var errs []error
		for _, s := range seen {
			if err := os.Remove(s); err == nil {
				removed = append(removed, s)
			} else if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("engine: removing stale %s: %w", s, err))
			}
		}
		return removed, errors.Join(errs...)
	}
	if err != nil {
		return nil, fmt.Errorf("engine: job %s: %w", job, err)
	}
	defer f.Close()
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if wouldBlock(err) {
			return nil, nil // live
		}
		return nil, fmt.Errorf("engine: job %s: locking %s: %w", job, path, err)
	}
	return removeJob(dir, job, f)
}

// removeIfFree removes the temporary lock file tmp if no process holds it.
func removeIfFree(tmp string) (bool, error) {
	f, err := os.Open(tmp)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("engine: %w", err)
	}
	defer f.Close()
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if wouldBlock(err) {
			return false, nil
		}
		return false, fmt.Errorf("engine: locking %s: %w", tmp, err)
	}
	if !sameFile(f, tmp) {
		return false, nil
	}
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("engine: removing stale %s: %w", tmp, err)
	}
	return true, nil
}

// AbortShm aborts job jobID's communicator on behalf of rank (a launcher's duty when rank's
// process died): it stores engine.AbortWord(rank) in the control region's abort word unless the
// communicator is already aborted. It reports false when the control region does not exist yet.
func AbortShm(jobID string, rank int) (bool, error) { return AbortShmFor(jobID, rank, wire.AbortUser) }

// AbortShmFor stores wire.AbortWord(rank, reason) in job jobID's abort word unless it is set.
func AbortShmFor(jobID string, rank, reason int) (bool, error) {
	if err := transport.ValidJobID(jobID); err != nil {
		return false, err
	}
	dir, err := shmDir()
	if err != nil {
		return false, err
	}
	path := shmPath(dir, ShmPrefix(jobID), wire.CtrlRegion)
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && st.Size() < wire.CtrlAbortOffset+8) {
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
	atomic.CompareAndSwapUint64(wire.WordAt(b, wire.CtrlAbortOffset), 0, wire.AbortWord(rank, reason))
	return true, nil
}

// AbortWordShm reads job jobID's abort word (0 when not aborted or when the control region does
// not exist).
func AbortWordShm(jobID string) (uint64, error) {
	path := shmPath(ShmDir(), ShmPrefix(jobID), wire.CtrlRegion)
	st, err := os.Stat(path)
	if err != nil || st.Size() < wire.CtrlAbortOffset+8 {
		return 0, nil
	}
	b, err := mapFile(path, int(st.Size()), false)
	if err != nil {
		return 0, err
	}
	defer syscall.Munmap(b)
	return atomic.LoadUint64(wire.WordAt(b, wire.CtrlAbortOffset)), nil
}
