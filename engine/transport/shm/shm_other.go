//go:build unix && !linux

package shm

import (
	"fmt"
	"os"
)

// allocate sizes f to size bytes. Without Linux's fallocate the file stays sparse: a filesystem
// that runs out of room fails at the first touch of a page (SIGBUS), not here.
func allocate(f *os.File, dir string, size int) error {
	if err := f.Truncate(int64(size)); err != nil {
		return fmt.Errorf("ftruncate %s: %w", f.Name(), err)
	}
	return nil
}

// freeBytes is unknown here.
func freeBytes(dir string) (int64, bool) { return 0, false }
