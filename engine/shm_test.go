//go:build unix

package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/kernels"
)

// deadPid returns the pid of a process that has exited.
func deadPid(t *testing.T) int {
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

// TestShmTransportAllReduce: four ranks, each with its own ShmTransport over the same job's files
// (each region mapped once per rank, as in separate processes), all-reduce correctly; the owner's
// Close removes the files.
func TestShmTransportAllReduce(t *testing.T) {
	const n, count = 4, 1000
	job := NewJobID(os.Getpid())
	comms := make([]*Comm, n)
	for r := range comms {
		tr, err := NewShmTransport(job, r == 0)
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
	assert.NotEmpty(t, ShmFiles(job))
	for r := n - 1; r >= 0; r-- {
		require.NoError(t, comms[r].Close())
	}
	assert.Empty(t, ShmFiles(job), "rank 0's Close removes the job's segments")
}

// TestShmRegionZeroAndShared: a region is zero when created, the same bytes for every rank, and
// a size disagreement is an error.
func TestShmRegionZeroAndShared(t *testing.T) {
	job := NewJobID(os.Getpid())
	a, err := NewShmTransport(job, true)
	require.NoError(t, err)
	b, err := NewShmTransport(job, false)
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
	assert.ErrorIs(t, err, ErrConfig)
	require.NoError(t, b.Close())
	require.NoError(t, a.Close())
	assert.Empty(t, ShmFiles(job))
}

// TestShmDirOverride: COLLPLAN_SHM_DIR moves the segments to another directory;
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
			job := NewJobID(os.Getpid())
			tr, err := NewShmTransport(job, true)
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
			_, err = tr.Region("ctrl", 4096)
			require.NoError(t, err)
			files, _ := filepath.Glob(filepath.Join(tc.dir, ShmPrefix(job)+"*"))
			assert.Len(t, files, 1, "the region")
			require.NoError(t, tr.Close())
			files, _ = filepath.Glob(filepath.Join(tc.dir, "*collplan-*"))
			assert.Empty(t, files)
		})
	}
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
			got, err := shmDirEnv(tc.env)
			if tc.err != "" {
				require.ErrorIs(t, err, ErrInvalid)
				assert.Contains(t, err.Error(), tc.err)
				err = (&Launcher{N: 1, Argv: []string{"true"}, Env: tc.env}).Run(context.Background())
				assert.ErrorContains(t, err, tc.err, "the launcher refuses to start")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestRemoveStaleShm: segments of a job whose owner is dead are removed; a live owner's are kept.
func TestRemoveStaleShm(t *testing.T) {
	stale := NewJobID(deadPid(t))
	live := NewJobID(os.Getpid())
	for _, j := range []string{stale, live} {
		require.NoError(t, os.WriteFile(filepath.Join(ShmDir(), ShmPrefix(j)+"ctrl"), []byte("x"), 0o600))
	}
	removed, err := RemoveStaleShm()
	require.NoError(t, err)
	assert.Contains(t, removed, filepath.Join(ShmDir(), ShmPrefix(stale)+"ctrl"))
	assert.Empty(t, ShmFiles(stale))
	assert.Len(t, ShmFiles(live), 1)
	_, err = RemoveShm(live)
	require.NoError(t, err)
}

// TestAbortShm: the launcher's abort word fails a waiting rank with an AbortError naming the dead
// rank.
func TestAbortShm(t *testing.T) {
	job := NewJobID(os.Getpid())
	tr, err := NewShmTransport(job, true)
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
	ok, err := AbortShm(job, 1)
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
		addr, err := FreeLoopbackAddr()
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
	pid, ok := jobOwner(jobs[0])
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
}

func TestEnvFrom(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	e, ok, err := EnvFrom(env(map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"}))
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, Env{Rank: 1, Size: 4, Addr: "127.0.0.1:" + strconv.Itoa(DefaultRendezvousPort), Source: "OMPI"}, e)
	e, ok, err = EnvFrom(env(map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "1234"}))
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "127.0.0.1:1234", e.Addr)
	_, _, err = EnvFrom(env(map[string]string{"PMI_RANK": "0", "PMI_SIZE": "2", "COLLPLAN_ADDR": "10.0.0.1:5"}))
	assert.ErrorIs(t, err, ErrInvalid)
	_, _, err = EnvFrom(env(map[string]string{"COLLPLAN_RANK": "2", "COLLPLAN_WORLD_SIZE": "2"}))
	assert.ErrorIs(t, err, ErrInvalid)
	_, ok, err = EnvFrom(env(nil))
	assert.NoError(t, err)
	assert.False(t, ok)
}

// TestLauncherRankFailure: a rank that exits non-zero ends the job with an error naming it; the
// ranks still running are killed after the grace period; the job's segments are removed.
func TestLauncherRankFailure(t *testing.T) {
	job := NewJobID(os.Getpid())
	require.NoError(t, os.WriteFile(filepath.Join(ShmDir(), ShmPrefix(job)+"ctrl"), nil, 0o600))
	l := &Launcher{N: 3, Argv: []string{"sh", "-c", `if [ "$COLLPLAN_RANK" = 1 ]; then exit 3; fi; exec sleep 30`},
		Grace: 300 * time.Millisecond, Job: job}
	start := time.Now()
	err := l.Run(context.Background())
	assert.Less(t, time.Since(start), 10*time.Second)
	var le *LaunchError
	require.True(t, errors.As(err, &le), "%v", err)
	assert.Equal(t, 1, le.Rank)
	assert.Contains(t, err.Error(), "rank 1: exit status 3")
	assert.Empty(t, ShmFiles(job))
}
