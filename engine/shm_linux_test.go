//go:build linux

package engine

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireUnshare skips the test unless it runs as root and unshare(1) may make the namespaces
// that flags ask for.
func requireUnshare(t *testing.T, flags ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test makes namespaces with unshare")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare command: the namespace tests need util-linux")
	}
	if out, err := exec.Command("unshare", append(flags, "true")...).CombinedOutput(); err != nil {
		t.Skipf("unshare %s refused (%v: %s): the test needs that namespace", strings.Join(flags, " "), err, out)
	}
}

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
			job := NewJobID(os.Getpid())
			tr, err := NewShmTransport(job, true)
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

// TestShmNoSpace runs TestShmNoSpaceInner in a mount namespace whose COLLPLAN_SHM_DIR is a 1 MiB
// tmpfs: regions that do not fit are a clear error (which region, how much it needs, how much is
// free), never SIGBUS or a hang.
func TestShmNoSpace(t *testing.T) {
	requireUnshare(t, "-m")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-m", "sh", "-c",
		`mount -t tmpfs -o size=1m collplan-test "$1" && exec "$2" -test.run='^TestShmNoSpaceInner$' -test.v`,
		"sh", dir, os.Args[0])
	cmd.Env = append(os.Environ(), "COLLPLAN_SHM_DIR="+dir, "COLLPLAN_SHM_NOSPACE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "--- PASS: TestShmNoSpaceInner")
	assert.NotContains(t, string(out), "SKIP")
}

// TestShmNoSpaceInner is TestShmNoSpace's part inside the namespace (it skips elsewhere).
func TestShmNoSpaceInner(t *testing.T) {
	if os.Getenv("COLLPLAN_SHM_NOSPACE") != "1" {
		t.Skip("run by TestShmNoSpace, in a mount namespace with a 1 MiB tmpfs")
	}
	dir := os.Getenv("COLLPLAN_SHM_DIR")
	require.Equal(t, dir, ShmDir())
	t.Run("region", func(t *testing.T) {
		tr, err := NewShmTransport(NewJobID(os.Getpid()), true)
		require.NoError(t, err)
		_, err = tr.Region("conn/0/0-1", 9<<19) // 4.5 MiB
		require.Error(t, err)
		assert.ErrorIs(t, err, syscall.ENOSPC)
		assert.Regexp(t, `^engine: shm region conn/0/0-1: `+regexp.QuoteMeta(dir)+
			` has 1\.0 MiB free, the region needs 4\.5 MiB \(set COLLPLAN_SHM_DIR to a larger tmpfs\): no space left on device$`, err.Error())
		r, err := tr.Region(CtrlRegion, 64<<10)
		require.NoError(t, err, "a region that fits is made")
		assert.Equal(t, make([]byte, 64<<10), r)
		require.NoError(t, tr.Close())
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		assert.Empty(t, files)
	})
	t.Run("job", func(t *testing.T) {
		// NCCL's default buffers make each connection's region 9.2 MiB; the control region fits.
		var out, errb lineBuffer
		l := &Launcher{N: 2, Argv: []string{os.Args[0], "-test.run=^TestShmHelperProcess$"},
			Env: append(os.Environ(), envShmHelper+"=rank", envShmBig+"=1"), Stdout: &out, Stderr: &errb,
			Grace: 2 * time.Second, Bind: BindNone}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		err := l.Run(ctx)
		require.Error(t, err)
		assert.Less(t, time.Since(start), 30*time.Second)
		require.NoError(t, ctx.Err(), "the job ended by itself")
		log := errb.String()
		assert.Regexp(t, `engine: shm region conn/\d+/\d+-\d+: `+regexp.QuoteMeta(dir)+` has [0-9.]+ [KM]iB free, the region needs 9\.2 MiB \(set COLLPLAN_SHM_DIR to a larger tmpfs\): no space left on device`, log)
		assert.NotContains(t, log, "SIGBUS")
		assert.NotContains(t, log, "unexpected fault address")
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		assert.Empty(t, files)
	})
}
