//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/engine/launch"
	"github.com/collplan/collplan/engine/transport/shm"
)

// TestEngineFaults: a rank killed -9, a rank stopped (SIGSTOP) and a rendezvous connection cut,
// in a launcher job and in a job whose ranks were started by hand (mpirun-style, no launcher), at
// 2, 3 and 4 ranks: every surviving rank exits with an error naming the rank within 10 s (the
// watchdog at 5 s), and no shared-memory segment is left. Before the rendezvous connections were
// kept and the watchdog existed, hand-started ranks waited forever on a killed peer (seen still
// waiting after 11 minutes) and every rank waited forever on a stopped one.
func TestEngineFaults(t *testing.T) {
	for _, mode := range []string{"launcher", "hand"} {
		for _, np := range []int{2, 3, 4} {
			for _, fault := range []string{"kill", "stop", "cut"} {
				// The rank at fault: the last one, except that a hand-started job at 3 ranks
				// loses rank 0 (the rendezvous hub and the segments' first owner). A cut is always
				// a peer's connection to rank 0.
				victim := np - 1
				if mode == "hand" && np == 3 && fault != "cut" {
					victim = 0
				}
				t.Run(fmt.Sprintf("%s/np%d/%s", mode, np, fault), func(t *testing.T) {
					if fault == "stop" {
						t.Parallel() // the watchdog's 5 s are waiting: run them side by side
					}
					if fault == "cut" {
						requireSockDestroy(t)
					}
					runEngineFault(t, mode, np, fault, victim)
				})
			}
		}
	}
}

// rankProc is one process of a faults job: a rank, or the launcher.
type rankProc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
	end  time.Time
}

func startProc(t *testing.T, env []string, args ...string) *rankProc {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), envTestMain+"=1"), env...)
	p := &rankProc{cmd: cmd, out: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	go func() {
		err := cmd.Wait()
		p.end = time.Now()
		p.done <- err
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case err := <-p.done:
			p.done <- err
		case <-time.After(5 * time.Second):
		}
	})
	return p
}

// wait returns the process's exit error, or reports that it still runs at deadline.
func (p *rankProc) wait(deadline time.Time) (error, bool) {
	select {
	case err := <-p.done:
		p.done <- err
		return err, true
	case <-time.After(time.Until(deadline)):
		return nil, false
	}
}

func runEngineFault(t *testing.T, mode string, np int, fault string, victim int) {
	shmDir := t.TempDir()
	common := []string{"allreduce", "-b", "8", "-e", "8", "-n", "5", "-w", "0", "-N", "0", "--timeout", "5s"}
	env := []string{shm.EnvShmDir + "=" + shmDir}
	var launcher *rankProc
	ranks := make([]*rankProc, np)
	pids := make([]int, np)
	if mode == "launcher" {
		launcher = startProc(t, env, append(common, "-np", strconv.Itoa(np))...)
		waitUntil(t, "the rank lines", 30*time.Second, func() bool {
			return len(rankPidRE.FindAllString(launcher.out.String(), -1)) == np
		}, launcher.out.String)
		for _, m := range rankPidRE.FindAllStringSubmatch(launcher.out.String(), -1) {
			r, _ := strconv.Atoi(m[1])
			pids[r], _ = strconv.Atoi(m[2])
		}
	} else {
		addr, err := launch.FreeLoopbackAddr()
		require.NoError(t, err)
		for r := range ranks {
			ranks[r] = startProc(t, append([]string{"COLLPLAN_RANK=" + strconv.Itoa(r), "COLLPLAN_WORLD_SIZE=" + strconv.Itoa(np),
				"COLLPLAN_ADDR=" + addr}, env...), common...)
			pids[r] = ranks[r].cmd.Process.Pid
		}
	}
	rank0 := launcher
	if rank0 == nil {
		rank0 = ranks[0]
	}
	// The job is in its sweep: rows keep coming.
	waitUntil(t, "rows", 30*time.Second, func() bool { return strings.Count(rank0.out.String(), " float ") > 20 }, rank0.out.String)

	switch fault {
	case "kill":
		require.NoError(t, syscall.Kill(pids[victim], syscall.SIGKILL))
	case "stop":
		require.NoError(t, syscall.Kill(pids[victim], syscall.SIGSTOP))
		t.Cleanup(func() { syscall.Kill(pids[victim], syscall.SIGKILL) })
	case "cut":
		cutConnection(t, pids[victim])
	}
	faulted := time.Now()
	deadline := faulted.Add(10 * time.Second)
	// A cut names either end of the cut connection, whichever saw it first.
	named := []int{victim}
	if fault == "cut" {
		named = []int{victim, 0}
	}
	namesRank := func(text string) bool {
		for _, r := range named {
			if strings.Contains(text, fmt.Sprintf("communicator aborted: rank %d: ", r)) {
				return true
			}
		}
		return false
	}
	if mode == "launcher" {
		err, ok := launcher.wait(deadline.Add(2 * time.Second))
		require.True(t, ok, "the launcher still runs 12 s after the fault:\n%s", launcher.out.String())
		require.Error(t, err)
		out := launcher.out.String()
		for r := range np {
			if r == victim && fault != "cut" {
				continue
			}
			line := lineOf(out, fmt.Sprintf("collbench: rank %d: ", r))
			assert.True(t, namesRank(line), "rank %d's error names rank %v: %q\n%s", r, named, line, out)
		}
		last := lineOf(out, "-rank job: ")
		assert.True(t, strings.Contains(last, fmt.Sprintf("launch: rank %d: ", named[0])) ||
			len(named) > 1 && strings.Contains(last, fmt.Sprintf("launch: rank %d: ", named[1])), "the launcher names the rank: %q", last)
		assert.LessOrEqual(t, launcher.end.Sub(faulted), 10*time.Second, "the job ended within 10 s")
	} else {
		for r, p := range ranks {
			if r == victim && fault != "cut" {
				continue
			}
			err, ok := p.wait(deadline)
			if !assert.True(t, ok, "rank %d still runs 10 s after the fault:\n%s", r, p.out.String()) {
				continue
			}
			assert.Error(t, err, "rank %d", r)
			line := lineOf(p.out.String(), fmt.Sprintf("collbench: rank %d: ", r))
			assert.True(t, namesRank(line), "rank %d's error names rank %v: %q", r, named, line)
		}
		if fault == "stop" {
			syscall.Kill(pids[victim], syscall.SIGKILL)
			ranks[victim].wait(time.Now().Add(5 * time.Second))
		}
	}
	left, _ := filepath.Glob(filepath.Join(shmDir, "*"))
	assert.Empty(t, left, "segments left behind")
}

func lineOf(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) || strings.Contains(l, prefix) {
			return l
		}
	}
	return ""
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool, show func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s:\n%s", what, show())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cutConnection destroys process pid's established TCP connections (a peer rank has one: its
// rendezvous connection to rank 0) with ss -K, as a broken network path would end them.
func cutConnection(t *testing.T, pid int) {
	t.Helper()
	ports := establishedPorts(t, pid)
	require.NotEmpty(t, ports, "process %d has no established connection", pid)
	for _, port := range ports {
		out, _ := exec.Command("ss", "-K", "-tn", "sport", "=", ":"+strconv.Itoa(port)).CombinedOutput()
		t.Logf("ss -K sport %d: %s", port, strings.TrimSpace(string(out)))
	}
}

// establishedPorts lists the local ports of process pid's established TCP sockets.
func establishedPorts(t *testing.T, pid int) []int {
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	require.NoError(t, err)
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	require.NoError(t, err)
	defer f.Close()
	var ports []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		// sl local_address rem_address st ... inode (field 9)
		if len(fs) < 10 || fs[3] != "01" || !inodes[fs[9]] {
			continue
		}
		_, port, ok := strings.Cut(fs[1], ":")
		if p, err := strconv.ParseUint(port, 16, 16); ok && err == nil {
			ports = append(ports, int(p))
		}
	}
	return ports
}

// requireSockDestroy skips where ss -K cannot end a socket (a kernel without
// CONFIG_INET_DIAG_DESTROY): the tool the cut needs is missing.
func requireSockDestroy(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("ss"); err != nil {
		t.Skip("ss (iproute2) not installed: the tool that cuts a connection is missing")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			c.Read(make([]byte, 1))
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, port, _ := strings.Cut(conn.LocalAddr().String(), ":")
	exec.Command("ss", "-K", "-tn", "sport", "=", ":"+port).Run()
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Skip("ss -K could not destroy a socket here (kernel without CONFIG_INET_DIAG_DESTROY): the tool that cuts a connection is missing")
	}
}

// TestStopAbortsBlockedCall: a hand-started rank blocked on a stopped peer (the watchdog is 10
// minutes away) stops on SIGTERM: the call is aborted hardGrace after it, the rank exits with an
// error saying so, and the segments are removed. (Calls ran under context.WithoutCancel: the first
// SIGTERM was ignored, and the second killed the rank and left the segments.)
func TestStopAbortsBlockedCall(t *testing.T) {
	shmDir := t.TempDir()
	addr, err := launch.FreeLoopbackAddr()
	require.NoError(t, err)
	ranks := make([]*rankProc, 2)
	for r := range ranks {
		ranks[r] = startProc(t, []string{"COLLPLAN_RANK=" + strconv.Itoa(r), "COLLPLAN_WORLD_SIZE=2", "COLLPLAN_ADDR=" + addr,
			shm.EnvShmDir + "=" + shmDir}, "allreduce", "-b", "8", "-e", "8", "-n", "5", "-w", "0", "-N", "0")
	}
	waitUntil(t, "rows", 30*time.Second, func() bool { return strings.Count(ranks[0].out.String(), " float ") > 20 }, ranks[0].out.String)
	require.NoError(t, syscall.Kill(ranks[1].cmd.Process.Pid, syscall.SIGSTOP))
	t.Cleanup(func() { syscall.Kill(ranks[1].cmd.Process.Pid, syscall.SIGKILL) })
	time.Sleep(100 * time.Millisecond) // rank 0 is now blocked in a call
	require.NoError(t, ranks[0].cmd.Process.Signal(syscall.SIGTERM))
	sent := time.Now()
	err, ok := ranks[0].wait(sent.Add(hardGrace + 3*time.Second))
	require.True(t, ok, "rank 0 still runs %s after SIGTERM:\n%s", hardGrace+3*time.Second, ranks[0].out.String())
	assert.Error(t, err)
	assert.Contains(t, ranks[0].out.String(), "context canceled", "the blocked call was aborted")
	assert.GreaterOrEqual(t, time.Since(sent), hardGrace-100*time.Millisecond, "calls get hardGrace to finish")
	left, _ := filepath.Glob(filepath.Join(shmDir, "*"))
	assert.Empty(t, left, "segments left behind")
}
