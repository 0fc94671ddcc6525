//go:build unix

package shm

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport"
)

// newJob returns a fresh job id and its lock, held by this process until the test ends.
func newJob(t *testing.T) string {
	t.Helper()
	lock, err := CreateJobLock(transport.NewJobID(os.Getpid()))
	require.NoError(t, err)
	t.Cleanup(func() { lock.Close() })
	return lock.Job()
}

// TestShmRegionZeroAndShared: a region is zero when created, the same bytes for every rank, and
// a size disagreement is an error.
func TestShmRegionZeroAndShared(t *testing.T) {
	lock, err := CreateJobLock(transport.NewJobID(os.Getpid()))
	require.NoError(t, err)
	job := lock.Job()
	require.NoError(t, lock.Close(), "the last one out removes the job's files")
	_, err = NewShmTransport(job)
	require.ErrorContains(t, err, "has ended", "a job whose lock is gone cannot be joined")
	lock, err = CreateJobLock(job)
	require.NoError(t, err)
	a, err := NewShmTransport(job)
	require.NoError(t, err)
	require.NoError(t, lock.Close(), "a still holds the job")
	b, err := NewShmTransport(job)
	require.NoError(t, err)
	ra, err := a.Region("conn/0/0-1", 4096)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 4096), ra)
	rb, err := b.Region("conn/0/0-1", 4096)
	require.NoError(t, err)
	ra[100] = 7
	assert.Equal(t, byte(7), rb[100])
	_, err = b.Region("ctrl", 128)
	require.NoError(t, err)
	_, err = a.Region("ctrl", 256)
	assert.ErrorIs(t, err, wire.ErrConfig)
	_, err = a.Region("lock", 256)
	assert.ErrorIs(t, err, wire.ErrInvalid, "the lock file's name is not a region's")
	require.NoError(t, b.Close())
	assert.NotEmpty(t, ShmFiles(job))
	require.NoError(t, a.Close())
	assert.Empty(t, ShmFiles(job))
}

// TestShmRegionConcurrent: ranks that create and size the same regions at the same moment all get
// the same zeroed bytes of the right size.
func TestShmRegionConcurrent(t *testing.T) {
	const n, size = 8, 1 << 20
	job := newJob(t)
	trs := make([]*ShmTransport, n)
	for r := range trs {
		var err error
		trs[r], err = NewShmTransport(job)
		require.NoError(t, err)
		defer trs[r].Close()
	}
	for _, name := range []string{"ctrl", "conn/0/0-1", "conn/1/1-0"} {
		regions := make([][]byte, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, tr := range trs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				regions[r], errs[r] = tr.Region(name, size)
			}()
		}
		wg.Wait()
		for r := range trs {
			require.NoError(t, errs[r], "%s rank %d", name, r)
			require.Len(t, regions[r], size)
		}
		assert.Equal(t, make([]byte, size), regions[0], name)
		regions[n-1][size-1] = 9
		for r := range trs {
			assert.Equal(t, byte(9), regions[r][size-1], "%s rank %d", name, r)
		}
	}
}

// TestJobLock: a job id is created once; a job without a lock cannot be joined, and the error
// names the lock file.
func TestJobLock(t *testing.T) {
	job := newJob(t)
	_, err := CreateJobLock(job)
	require.ErrorContains(t, err, "in use")
	other := transport.NewJobID(os.Getpid())
	_, err = NewShmTransport(other)
	require.ErrorContains(t, err, filepath.Join(ShmDir(), ShmPrefix(other)+"lock"))
	_, err = CreateJobLock("x-1")
	require.ErrorIs(t, err, wire.ErrInvalid)
}

// TestShmDirOverride: COLLPLAN_SHM_DIR moves the segments (and lock files) to another directory;
// one that is not an existing directory, named by an absolute path, is an error naming the
// variable, wherever the directory is used.
func TestShmDirOverride(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	for _, tc := range []struct {
		name, dir, err string
	}{
		{"directory", tmp, ""},
		{"missing", filepath.Join(tmp, "none"), "no such file or directory"},
		{"file", file, "not a directory"},
		{"relative", "shm", "not an absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("COLLPLAN_SHM_DIR", tc.dir)
			assert.Equal(t, tc.dir, ShmDir())
			lock, err := CreateJobLock(transport.NewJobID(os.Getpid()))
			_, serr := RemoveStaleShm()
			if tc.err != "" {
				for _, err := range []error{err, serr} {
					require.Error(t, err)
					assert.Contains(t, err.Error(), "COLLPLAN_SHM_DIR="+strconv.Quote(tc.dir))
					assert.Contains(t, err.Error(), tc.err)
				}
				return
			}
			require.NoError(t, err)
			require.NoError(t, serr)
			tr, err := NewShmTransport(lock.Job())
			require.NoError(t, err)
			_, err = tr.Region("ctrl", 4096)
			require.NoError(t, err)
			files, _ := filepath.Glob(filepath.Join(tc.dir, ShmPrefix(lock.Job())+"*"))
			assert.Len(t, files, 2, "the lock and the region")
			require.NoError(t, errors.Join(tr.Close(), lock.Close()))
			files, _ = filepath.Glob(filepath.Join(tc.dir, "*collplan-*"))
			assert.Empty(t, files)
		})
	}
}
