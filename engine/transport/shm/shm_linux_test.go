package shm

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShmRegionAllocated: a region's memory is allocated when it is made (fallocate), not at the
// first touch, so that a full tmpfs is an error at Region instead of SIGBUS in a rank; where the
// filesystem cannot allocate, the region is still made (sized, sparse).
func TestShmRegionAllocated(t *testing.T) {
	if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
		t.Skip("no /dev/shm")
	}
	t.Setenv("COLLPLAN_SHM_DIR", "/dev/shm")
	const size = 1 << 20
	for _, tc := range []struct {
		name      string
		fallocate func(fd int, mode uint32, off, n int64) error
		allocated bool
	}{
		{"fallocate", nil, true},
		{"unsupported", func(int, uint32, int64, int64) error { return syscall.EOPNOTSUPP }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fallocate != nil {
				saved := fallocate
				fallocate = tc.fallocate
				t.Cleanup(func() { fallocate = saved })
			}
			job := newJob(t)
			tr, err := NewShmTransport(job)
			require.NoError(t, err)
			defer tr.Close()
			r, err := tr.Region("conn/0/0-1", size)
			require.NoError(t, err)
			require.Len(t, r, size)
			var st syscall.Stat_t
			require.NoError(t, syscall.Stat(filepath.Join("/dev/shm", ShmPrefix(job)+"conn.0.0-1"), &st))
			assert.EqualValues(t, size, st.Size)
			if tc.allocated {
				assert.GreaterOrEqual(t, st.Blocks*512, int64(size), "the region's pages are allocated")
			} else {
				assert.Less(t, st.Blocks*512, int64(size), "sparse where fallocate is unsupported")
			}
		})
	}
}
