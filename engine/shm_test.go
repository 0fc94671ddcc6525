//go:build unix

package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/engine/launch"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/engine/transport/shm"
	"github.com/collplan/collplan/kernels"
)

// deadPid returns the pid of a process that has exited.
func deadPid(t *testing.T) int {
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

// newJob returns a fresh job id and its lock, held by this process until the test ends.
func newJob(t *testing.T) string {
	t.Helper()
	lock, err := shm.CreateJobLock(transport.NewJobID(os.Getpid()))
	require.NoError(t, err)
	t.Cleanup(func() { lock.Close() })
	return lock.Job()
}

// TestShmTransportAllReduce: four ranks, each with its own ShmTransport over the same job's files
// (each region mapped once per rank, as in separate processes), all-reduce correctly; the last of
// the job's holders to let go (here the job's lock, after every rank closed) removes the files.
func TestShmTransportAllReduce(t *testing.T) {
	const n, count = 4, 1000
	lock, err := shm.CreateJobLock(transport.NewJobID(os.Getpid()))
	require.NoError(t, err)
	job := lock.Job()
	comms := make([]*Comm, n)
	for r := range comms {
		tr, err := shm.NewShmTransport(job)
		require.NoError(t, err)
		comms[r], err = New(r, n, tr, Config{Buffers: tinyBuffers()})
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	bufs := make([][]byte, n)
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 4*count)
			for i := 0; i < count; i++ {
				binary.LittleEndian.PutUint32(b[4*i:], uint32(r+i))
			}
			errs[r] = c.AllReduce(context.Background(), b, b, count, kernels.Int32, kernels.Sum)
			bufs[r] = b
		}()
	}
	wg.Wait()
	for r := range comms {
		require.NoError(t, errs[r])
		for i := 0; i < count; i++ {
			require.Equal(t, uint32(n*i+n*(n-1)/2), binary.LittleEndian.Uint32(bufs[r][4*i:]), "rank %d element %d", r, i)
		}
	}
	assert.NotEmpty(t, shm.ShmFiles(job))
	for r := n - 1; r >= 0; r-- {
		require.NoError(t, comms[r].Close())
	}
	assert.NotEmpty(t, shm.ShmFiles(job), "the job's lock still holds the files")
	require.NoError(t, lock.Close())
	assert.Empty(t, shm.ShmFiles(job), "the last one out removes the job's files")
}

// TestShmDirEnv: a launcher hands its segment directory to ranks whose environment names none,
// and refuses ranks that would use another one.
func TestShmDirEnv(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, ours string
		env, want  []string
		err        string
	}{
		{"neither", "", []string{"A=1"}, []string{"A=1"}, ""},
		{"handed down", dir, []string{"A=1"}, []string{"A=1", "COLLPLAN_SHM_DIR=" + dir}, ""},
		{"same", dir, []string{"COLLPLAN_SHM_DIR=" + dir}, []string{"COLLPLAN_SHM_DIR=" + dir}, ""},
		{"other", dir, []string{"COLLPLAN_SHM_DIR=/dev/shm"}, nil, `COLLPLAN_SHM_DIR="/dev/shm", this process "` + dir + `"`},
		{"only theirs", "", []string{"COLLPLAN_SHM_DIR=" + dir}, nil, `COLLPLAN_SHM_DIR="` + dir + `", this process ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("COLLPLAN_SHM_DIR", tc.ours)
			got, err := shm.ShmDirEnv(tc.env)
			if tc.err != "" {
				require.ErrorIs(t, err, ErrInvalid)
				assert.Contains(t, err.Error(), tc.err)
				err = (&launch.Launcher{N: 1, Argv: []string{"true"}, Env: tc.env}).Run(context.Background())
				assert.ErrorContains(t, err, tc.err, "the launcher refuses to start")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestRemoveStaleShm: a job is stale when no process holds its lock (every one of them was killed
// with SIGKILL, whatever its id's pid says) or when it has no lock file; a job some process holds
// is kept, even if its id names a dead pid (as the ids of a job in another PID namespace do).
func TestRemoveStaleShm(t *testing.T) {
	// Other tests' cleanups (other checkouts' included) must not interfere: a private directory.
	t.Setenv("COLLPLAN_SHM_DIR", t.TempDir())
	dir := shm.ShmDir()
	type job struct {
		id    string
		stale bool
	}
	var jobs []job

	// Every process of the job killed; its id names this (live) process.
	killed := transport.NewJobID(os.Getpid())
	holders := []*holder{startHolder(t, killed, true), startHolder(t, killed, false)}
	for _, h := range holders {
		h.kill(t)
	}
	jobs = append(jobs, job{killed, true})

	// Held by this process, ids naming a dead and a live pid.
	for _, id := range []string{transport.NewJobID(deadPid(t)), transport.NewJobID(os.Getpid())} {
		lock, err := shm.CreateJobLock(id)
		require.NoError(t, err)
		defer lock.Close()
		tr, err := shm.NewShmTransport(id)
		require.NoError(t, err)
		defer tr.Close()
		_, err = tr.Region(transport.CtrlRegion, 4096)
		require.NoError(t, err)
		jobs = append(jobs, job{id, false})
	}

	// A segment without a lock file.
	nolock := transport.NewJobID(os.Getpid())
	require.NoError(t, os.WriteFile(filepath.Join(dir, shm.ShmPrefix(nolock)+"ctrl"), []byte("x"), 0o600))
	jobs = append(jobs, job{nolock, true})

	// A lock under construction whose creator died before putting it in place.
	orphan := filepath.Join(dir, "."+shm.ShmPrefix(transport.NewJobID(os.Getpid()))+"lock-0123abcd")
	require.NoError(t, os.WriteFile(orphan, nil, 0o600))

	for _, j := range jobs {
		require.NotEmpty(t, shm.ShmFiles(j.id), j.id)
	}
	removed, err := shm.RemoveStaleShm()
	require.NoError(t, err)
	for _, j := range jobs {
		if j.stale {
			assert.Empty(t, shm.ShmFiles(j.id), "stale job %s", j.id)
			for _, f := range []string{"ctrl", "lock"} {
				if j.id == killed || f == "ctrl" {
					assert.Contains(t, removed, filepath.Join(dir, shm.ShmPrefix(j.id)+f))
				}
			}
		} else {
			assert.Len(t, shm.ShmFiles(j.id), 2, "live job %s keeps its lock and region", j.id)
		}
	}
	assert.NoFileExists(t, orphan)
	assert.Contains(t, removed, orphan)
}

// TestShmLastOneOut: in a job started by hand, SIGKILL of its owner (rank 0, which created the
// job's lock) leaves the files to the other processes: the last of them to close removes them.
func TestShmLastOneOut(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) {
			job := transport.NewJobID(os.Getpid())
			hs := []*holder{startHolder(t, job, true)}
			for range n - 1 {
				hs = append(hs, startHolder(t, job, false))
			}
			require.NotEmpty(t, shm.ShmFiles(job))
			hs[0].kill(t)
			assert.NotEmpty(t, shm.ShmFiles(job), "the others still hold the job")
			for _, h := range hs[1 : n-1] {
				h.close(t)
				assert.NotEmpty(t, shm.ShmFiles(job), "the others still hold the job")
			}
			hs[n-1].close(t)
			assert.Empty(t, shm.ShmFiles(job), "no segment left after the last rank closed")
		})
	}
}

// TestLauncherKillRank: SIGKILL of a rank of a launched job ends the job with an error naming the
// rank, and no file of the job is left.
func TestLauncherKillRank(t *testing.T) {
	rankRE := regexp.MustCompile(`READY rank=(\d+) pid=(\d+) job=(\S+)`)
	for _, tc := range []struct{ n, kill int }{{2, 0}, {3, 1}, {4, 3}} {
		t.Run(fmt.Sprintf("np%d", tc.n), func(t *testing.T) {
			job := transport.NewJobID(os.Getpid())
			out, errb := &lineBuffer{}, &lineBuffer{}
			l := &launch.Launcher{N: tc.n, Argv: []string{os.Args[0], "-test.run=^TestShmHelperProcess$"},
				Env: append(os.Environ(), envShmHelper+"=rank", envShmLoop+"=1"), Stdout: out, Stderr: errb,
				Grace: 2 * time.Second, Job: job, Bind: launch.BindNone}
			done := make(chan error, 1)
			go func() { done <- l.Run(context.Background()) }()
			lines := waitLines(t, out, rankRE, tc.n, 30*time.Second)
			for _, m := range lines {
				if r, _ := strconv.Atoi(m[1]); r == tc.kill {
					pid, _ := strconv.Atoi(m[2])
					require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
				}
			}
			select {
			case err := <-done:
				rank, ok := launch.IsLaunchError(err)
				require.True(t, ok, "%v", err)
				assert.Equal(t, tc.kill, rank, "%v", err)
				assert.Contains(t, err.Error(), "signal: killed")
			case <-time.After(30 * time.Second):
				t.Fatalf("the job still runs 30 s after rank %d was killed:\n%s", tc.kill, errb.String())
			}
			assert.Empty(t, shm.ShmFiles(job), "no file of the job is left")
		})
	}
}

// TestAbortShm: the launcher's abort word fails a waiting rank with an AbortError naming the dead
// rank.
func TestAbortShm(t *testing.T) {
	job := newJob(t)
	tr, err := shm.NewShmTransport(job)
	require.NoError(t, err)
	c, err := New(0, 2, tr, Config{})
	require.NoError(t, err)
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		b := make([]byte, 8)
		done <- c.AllReduce(context.Background(), b, b, 2, kernels.Float32, kernels.Sum)
	}()
	time.Sleep(50 * time.Millisecond)
	ok, err := shm.AbortShm(job, 1)
	require.NoError(t, err)
	require.True(t, ok)
	select {
	case err := <-done:
		var ae *AbortError
		require.ErrorAs(t, err, &ae)
		assert.Equal(t, 1, ae.Rank)
	case <-time.After(10 * time.Second):
		t.Fatal("rank 0 still waits 10 s after the abort")
	}
}

// TestRendezvous: ranks agree on a job id; a configuration difference is refused on every rank;
// a rank that never shows up ends the wait at the timeout.
func TestRendezvous(t *testing.T) {
	rendezvous := func(n int, hashes []uint64, timeout time.Duration) ([]string, []error) {
		addr, err := launch.FreeLoopbackAddr()
		require.NoError(t, err)
		jobs, errs := make([]string, n), make([]error, n)
		var wg sync.WaitGroup
		for r := range hashes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				jobs[r], errs[r] = Rendezvous(context.Background(), r, n, addr, hashes[r], "", timeout)
			}()
		}
		wg.Wait()
		return jobs, errs
	}
	jobs, errs := rendezvous(3, []uint64{7, 7, 7}, 5*time.Second)
	for r := range jobs {
		require.NoError(t, errs[r])
		assert.Equal(t, jobs[0], jobs[r])
	}
	pid, ok := transport.JobOwner(jobs[0])
	assert.True(t, ok)
	assert.Equal(t, os.Getpid(), pid)

	_, errs = rendezvous(3, []uint64{7, 7, 8}, 5*time.Second)
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		assert.ErrorIs(t, err, ErrConfig)
		assert.Contains(t, err.Error(), "rank 2 has configuration hash 0x8")
	}

	start := time.Now()
	_, errs = rendezvous(3, []uint64{7, 7}, 300*time.Millisecond)
	assert.Less(t, time.Since(start), 5*time.Second)
	require.Error(t, errs[0])
	assert.Contains(t, errs[0].Error(), "ranks 2 did not join")
	assert.Error(t, errs[1])
}

func TestConfigHash(t *testing.T) {
	a, err := ConfigHash(4, Config{})
	require.NoError(t, err)
	b, err := ConfigHash(4, Config{RanksPerNode: 4, Channels: 2})
	require.NoError(t, err)
	assert.Equal(t, a, b, "defaults hash like their explicit values")
	c, err := ConfigHash(4, Config{RanksPerNode: 2})
	require.NoError(t, err)
	assert.NotEqual(t, a, c)
	d, err := ConfigHash(4, Config{}, "-n 20")
	require.NoError(t, err)
	assert.NotEqual(t, a, d)
	e, err := ConfigHash(4, Config{CollNet: CollNetConfig{Addr: "127.0.0.1:7777"}})
	require.NoError(t, err)
	assert.NotEqual(t, a, e, "ranks pointed at different CollNet endpoints do not start together")
	f, err := ConfigHash(4, Config{CollNet: CollNetConfig{Addr: "127.0.0.1:7777", Job: "x"}})
	require.NoError(t, err)
	assert.Equal(t, e, f, "the job name comes from the rendezvous, after the hash")
}

func TestEnvFrom(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	e, ok, err := launch.EnvFrom(env(map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"}))
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, launch.Env{Rank: 1, Size: 4, Addr: "127.0.0.1:" + strconv.Itoa(launch.DefaultRendezvousPort), Source: "OMPI"}, e)
	e, ok, err = launch.EnvFrom(env(map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "1234"}))
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "127.0.0.1:1234", e.Addr)
	_, _, err = launch.EnvFrom(env(map[string]string{"PMI_RANK": "0", "PMI_SIZE": "2", "COLLPLAN_ADDR": "10.0.0.1:5"}))
	assert.ErrorIs(t, err, ErrInvalid)
	_, _, err = launch.EnvFrom(env(map[string]string{"COLLPLAN_RANK": "2", "COLLPLAN_WORLD_SIZE": "2"}))
	assert.ErrorIs(t, err, ErrInvalid)
	_, ok, err = launch.EnvFrom(env(nil))
	assert.NoError(t, err)
	assert.False(t, ok)
}

// TestLauncherRankFailure: a rank that exits non-zero ends the job with an error naming it; the
// ranks still running are killed after the grace period; the job's segments are removed.
func TestLauncherRankFailure(t *testing.T) {
	job := transport.NewJobID(os.Getpid())
	require.NoError(t, os.WriteFile(filepath.Join(shm.ShmDir(), shm.ShmPrefix(job)+"ctrl"), nil, 0o600))
	l := &launch.Launcher{N: 3, Argv: []string{"sh", "-c", `if [ "$COLLPLAN_RANK" = 1 ]; then exit 3; fi; exec sleep 30`},
		Grace: 300 * time.Millisecond, Job: job}
	start := time.Now()
	err := l.Run(context.Background())
	assert.Less(t, time.Since(start), 10*time.Second)
	var le *launch.LaunchError
	require.True(t, errors.As(err, &le), "%v", err)
	assert.Equal(t, 1, le.Rank)
	assert.Contains(t, err.Error(), "rank 1: exit status 3")
	assert.Empty(t, shm.ShmFiles(job))
}

// TestLauncherStopWhileStarting: a stop request while the launcher is still starting ranks ends
// the start at once (it checks between starts), kills and reaps the ranks already started and
// returns. (It used to start every rank first: collbench -np 100000 started thousands of processes
// and ignored SIGTERM meanwhile.)
func TestLauncherStopWhileStarting(t *testing.T) {
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	l := &launch.Launcher{N: 200, Argv: []string{"sh", "-c", `echo $$ >> "$0"; exec sleep 30`, started}, Grace: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// Cancel once a few ranks run.
		for {
			if b, _ := os.ReadFile(started); strings.Count(string(b), "\n") >= 3 {
				cancel()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	start := time.Now()
	err := l.Run(ctx)
	took := time.Since(start)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "of 200 ranks")
	assert.Less(t, took, 5*time.Second)
	b, _ := os.ReadFile(started)
	pids := strings.Fields(string(b))
	assert.Less(t, len(pids), 200, "not every rank was started")
	for _, p := range pids {
		pid, _ := strconv.Atoi(p)
		assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "rank pid %d left running", pid)
	}
}
