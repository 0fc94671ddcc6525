package shm

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fallocate is unix.Fallocate; a variable so that tests can make it fail.
var fallocate = unix.Fallocate

// allocate gives f (in directory dir) size bytes of allocated memory. Segments sized with
// ftruncate alone are sparse, and a tmpfs without room for a page then kills the rank that first
// touches it with SIGBUS; fallocate allocates every page now or fails with ENOSPC. Several ranks
// may allocate the same file at once: tmpfs serializes them (the inode lock), the range already
// allocated is left as it is (its bytes too), and the size only grows once the whole range is
// allocated, so a rank never sees a size between 0 and size.
//
// Where the filesystem has no fallocate (EOPNOTSUPP: /dev/shm is tmpfs, which has it, but
// COLLPLAN_SHM_DIR or os.TempDir may not be), allocate checks that the free space covers the
// region and sizes the file with ftruncate: sparse as before, best effort. Writing zeros instead
// would overwrite the bytes of a rank that already uses the region.
func allocate(f *os.File, dir string, size int) error {
	var err error
	// tmpfs gives up on a pending signal (EINTR) and undoes the pages it added; signals reach a
	// thread in a system call only now and then (a child's exit, a profiler's tick: Go preempts
	// goroutines by signal, but not threads in system calls), so retrying succeeds. 100 is a
	// bound, not a measured number.
	for range 100 {
		if err = fallocate(int(f.Fd()), 0, 0, int64(size)); err != unix.EINTR {
			break
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EFBIG), errors.Is(err, unix.ENOMEM), errors.Is(err, unix.EDQUOT):
		return noSpaceError(dir, size, err)
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS):
		if free, ok := freeBytes(dir); ok && free < int64(size) {
			return noSpaceError(dir, size, unix.ENOSPC)
		}
		if err := f.Truncate(int64(size)); err != nil {
			return fmt.Errorf("ftruncate %s: %w", f.Name(), err)
		}
		return nil
	}
	return fmt.Errorf("fallocate %s: %w", f.Name(), err)
}

// freeBytes returns the space that dir's filesystem has free for unprivileged use.
func freeBytes(dir string) (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
