//go:build linux

package engine

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/engine/launch"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/engine/transport/shm"
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
	require.Equal(t, dir, shm.ShmDir())
	t.Run("region", func(t *testing.T) {
		lock, err := shm.CreateJobLock(transport.NewJobID(os.Getpid()))
		require.NoError(t, err)
		tr, err := shm.NewShmTransport(lock.Job())
		require.NoError(t, err)
		_, err = tr.Region("conn/0/0-1", 9<<19) // 4.5 MiB
		require.Error(t, err)
		assert.ErrorIs(t, err, syscall.ENOSPC)
		assert.Regexp(t, `^engine: shm region conn/0/0-1: `+regexp.QuoteMeta(dir)+
			` has 1\.0 MiB free, the region needs 4\.5 MiB \(set COLLPLAN_SHM_DIR to a larger tmpfs\): no space left on device$`, err.Error())
		r, err := tr.Region(transport.CtrlRegion, 64<<10)
		require.NoError(t, err, "a region that fits is made")
		assert.Equal(t, make([]byte, 64<<10), r)
		require.NoError(t, errors.Join(tr.Close(), lock.Close()))
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		assert.Empty(t, files)
	})
	t.Run("job", func(t *testing.T) {
		// NCCL's default buffers make each connection's region 9.2 MiB; the control region fits.
		var out, errb lineBuffer
		l := &launch.Launcher{N: 2, Argv: []string{os.Args[0], "-test.run=^TestShmHelperProcess$"},
			Env: append(os.Environ(), envShmHelper+"=rank", envShmBig+"=1"), Stdout: &out, Stderr: &errb,
			Grace: 2 * time.Second, Bind: launch.BindNone}
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

// TestShmOtherPIDNamespace: a job started by hand inside another PID namespace (a container:
// unshare -pf) has pids that mean nothing outside; another job's cleanup outside (RemoveStaleShm,
// and a launcher's start) leaves its files alone, and the job finishes correctly.
func TestShmOtherPIDNamespace(t *testing.T) {
	requireUnshare(t, "-pf", "--mount-proc")
	// Other tests' cleanups (other checkouts' included) must not interfere: a private directory.
	t.Setenv("COLLPLAN_SHM_DIR", t.TempDir())
	base := deadPidWindow(t, 500)
	goFile := filepath.Join(t.TempDir(), "go")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-pf", "--kill-child", "--mount-proc", os.Args[0], "-test.run=^TestShmHelperProcess$")
	cmd.Env = append(os.Environ(), envShmHelper+"=nsdriver", envShmLastPid+"="+strconv.Itoa(base), envShmGo+"="+goFile)
	out := &lineBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cancel()
		<-done
	}()
	ready := waitLines(t, out, regexp.MustCompile(`READY rank=(\d) pid=(\d+) job=(\S+)`), 2, time.Minute)
	job := ready[0][3]
	owner, ok := transport.JobOwner(job)
	require.True(t, ok, job)
	require.Greater(t, owner, base, "rank 0's pid in its namespace")
	require.ErrorIs(t, syscall.Kill(owner, 0), syscall.ESRCH, "no process here has the job's owner pid %d", owner)

	before := shm.ShmFiles(job)
	require.NotEmpty(t, before)
	_, err := shm.RemoveStaleShm()
	require.NoError(t, err)
	assert.ElementsMatch(t, before, shm.ShmFiles(job), "RemoveStaleShm outside kept the live job's files")
	require.NoError(t, (&launch.Launcher{N: 1, Argv: []string{"true"}}).Run(ctx))
	assert.ElementsMatch(t, before, shm.ShmFiles(job), "another job's start kept the live job's files")

	require.NoError(t, os.WriteFile(goFile, nil, 0o600))
	select {
	case err := <-done:
		done <- err
		require.NoError(t, err, "%s", out.String())
	case <-time.After(time.Minute):
		t.Fatalf("the job still runs a minute after it was let go:\n%s", out.String())
	}
	assert.Len(t, regexp.MustCompile(`DONE rank=\d`).FindAllString(out.String(), -1), 2, out.String())
	assert.Empty(t, shm.ShmFiles(job), "the job's last process removed its files")
}

// deadPidWindow returns a pid p such that no process has a pid in p+1..p+n here.
func deadPidWindow(t *testing.T, n int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	require.NoError(t, err)
	max, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	for p := max - n - 1; p > 300; p -= n {
		free := true
		for q := p + 1; q <= p+n && free; q++ {
			free = syscall.Kill(q, 0) == syscall.ESRCH
		}
		if free {
			return p
		}
	}
	t.Skip("no window of unused pids")
	return 0
}
