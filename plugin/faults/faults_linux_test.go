package faults

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/collplan/collplan/internal/proctree"
	"github.com/collplan/collplan/plugin"
)

// bin holds the binaries TestMain builds.
var bin string

func TestMain(m *testing.M) {
	// Orphans of the commands under test (a plugin's descendants) are reparented to this process,
	// so that "no process left behind" covers the test's whole process tree.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "faults: PR_SET_CHILD_SUBREAPER:", err)
		os.Exit(1)
	}
	plugin.MainWithCommands(m, &bin, nil, "planner", "collbench", "tuner-nccl", "tuner-fault", "tuner-table", "tuner-rules")
}

// outcome is what the host must do with a fault in one place.
type outcome int

const (
	na      outcome = iota // the fault cannot be set up there
	works                  // the tuner is used: it was not a fault for the host
	fails                  // planner: exit 2 with one line; collbench: the FALLBACK note; reload: the old policy kept
	refused                // bad flags: exit 2 with one line before anything runs (reload: old policy kept)
)

// scene is one case's files.
type scene struct {
	dir    string // the case's directory
	on     string // the file whose existence arms a script fault
	config string // the --tuner-config file
	addr   string // an address that accepts connections and never answers
}

// fault is one misbehaviour. tuner returns the --tuner value; arm turns the fault on (before the
// command for planner and collbench start, after the first rows for a reload).
type fault struct {
	name    string
	tuner   func(t *testing.T, s *scene) string
	config  string // initial --tuner-config content ("" for none)
	flags   func(s *scene) []string
	arm     func(t *testing.T, s *scene)
	timeout time.Duration // the deadline that applies (--tuner-timeout, or the 2 s call default)
	// slack is how long past the deadline a command may take to return: 1 s unless set. The fork
	// bomb's 64 processes hold both cores of a 2-core machine until they are killed, and the job
	// beside them starts slower: a loaded run took 1.07 s past the deadline.
	slack                  time.Duration
	want                   string // in the error or fallback note
	planner, start, reload outcome
}

// within is the fault's slack past its deadline.
func (f fault) within() time.Duration {
	if f.slack > 0 {
		return f.slack
	}
	return time.Second
}

// script writes a shell tuner that runs body when the scene is armed and otherwise is tuner-nccl.
func script(body string) func(t *testing.T, s *scene) string {
	return func(t *testing.T, s *scene) string {
		p := filepath.Join(s.dir, "tuner.sh")
		text := "#!/bin/sh\nif [ -e '" + s.on + "' ]; then\n" + strings.ReplaceAll(body, "ADDR", s.addr) + "\nfi\nexec '" + filepath.Join(bin, "tuner-nccl") + "'\n"
		require.NoError(t, os.WriteFile(p, []byte(text), 0o755))
		return p
	}
}

func binary(name string) func(t *testing.T, s *scene) string {
	return func(*testing.T, *scene) string { return filepath.Join(bin, name) }
}

func armFile(t *testing.T, s *scene) { require.NoError(t, os.WriteFile(s.on, nil, 0o644)) }

// personality makes tuner-fault misbehave as its configuration's first word says.
func personality(word string) func(t *testing.T, s *scene) {
	return func(t *testing.T, s *scene) { replace(t, s.config, []byte(word+"\n")) }
}

// replace swaps a file's content through a rename, so a running reader sees old or new whole.
func replace(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, data, 0o755))
	require.NoError(t, os.Rename(tmp, path))
}

func timeoutFlag(*scene) []string { return []string{"--tuner-timeout", "1s"} }

// forkBomb runs a fork bomb as an unprivileged user (nobody, when the test is root) whose process
// count is capped, so that the host, not the machine, is what is tested.
func forkBomb() string {
	bomb := `perl -e 'fork while 1'`
	if os.Geteuid() == 0 {
		return `exec setpriv --reuid=65534 --regid=65534 --clear-groups prlimit --nproc=64 ` + bomb
	}
	return fmt.Sprintf(`exec prlimit --nproc=%d %s`, userProcs()+64, bomb)
}

// userProcs counts this user's processes (RLIMIT_NPROC counts them all).
func userProcs() int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if fi, err := os.Stat("/proc/" + e.Name()); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Geteuid() {
				n++
			}
		}
	}
	return n
}

func faults() []fault {
	crash := func(word, want string) fault {
		return fault{name: "tuner-fault " + word, tuner: binary("tuner-fault"), config: "ok", flags: timeoutFlag,
			arm: personality(word), timeout: time.Second, want: want, planner: fails, start: fails, reload: fails}
	}
	return []fault{
		{name: "child outlives the plugin", tuner: script("sleep 600"), flags: timeoutFlag, arm: armFile, timeout: time.Second,
			want: "timeout while waiting for plugin to start", planner: fails, start: fails, reload: fails},
		{name: "exec sleep", tuner: script("exec sleep 600"), flags: timeoutFlag, arm: armFile, timeout: time.Second,
			want: "timeout while waiting for plugin to start", planner: fails, start: fails, reload: fails},
		{name: "healthy with a background child", tuner: script(""), flags: timeoutFlag,
			arm: func(t *testing.T, s *scene) {
				armFile(t, s)
				replace(t, filepath.Join(s.dir, "tuner.sh"), []byte("#!/bin/sh\nsleep 600 &\nexec '"+filepath.Join(bin, "tuner-nccl")+"'\n"))
			}, timeout: time.Second, planner: works, start: works, reload: works},
		{name: "handshake names a silent port", tuner: script("printf '1|1|tcp|ADDR|grpc\\n'; exec sleep 600"), flags: timeoutFlag,
			arm: armFile, timeout: time.Second, want: "timeout while waiting for plugin to start", planner: fails, start: fails, reload: fails},
		{name: "fork bomb", tuner: script(forkBomb()), flags: timeoutFlag, arm: armFile, timeout: time.Second, slack: 2 * time.Second,
			want: "timeout while waiting for plugin to start", planner: fails, start: fails, reload: fails},
		{name: "not a plugin", tuner: script("exec /bin/true"), flags: timeoutFlag, arm: armFile, timeout: time.Second,
			want: "without printing go-plugin's handshake line", planner: fails, start: fails, reload: fails},
		{name: "no handshake", tuner: script("COLLPLAN_TUNER_FAULT=nohandshake exec '" + filepath.Join(bin, "tuner-fault") + "'"),
			flags: timeoutFlag, arm: armFile, timeout: time.Second, want: "timeout while waiting for plugin to start",
			planner: fails, start: fails, reload: fails},
		crash("exit", "exiting mid-compile"),
		crash("panic", "panicking inside Tune"),
		crash("sleep", "no answer within 1s"),
		crash("garbage", "invalid reply"),
		crash("illegal", "a tuner cannot enable it"),
		crash("disableall", "disables every legal cell"),
		crash("badinit", "base_lat has 3 values"),
		crash("badconfig", "refuses its configuration"),
		{name: "stderr flood", tuner: binary("tuner-fault"), config: "ok", arm: personality("chatty"), timeout: 2 * time.Second,
			planner: works, start: works, reload: works},
		{name: "checksum mismatch",
			tuner: func(t *testing.T, s *scene) string {
				p := filepath.Join(s.dir, "tuner-pinned")
				replace(t, p, mustRead(t, filepath.Join(bin, "tuner-nccl")))
				return p
			},
			flags: func(s *scene) []string {
				sum := sha256.Sum256(mustReadFile(filepath.Join(bin, "tuner-nccl")))
				return []string{"--tuner-timeout", "1s", "--tuner-sha256", hex.EncodeToString(sum[:])}
			},
			arm: func(t *testing.T, s *scene) {
				replace(t, filepath.Join(s.dir, "tuner-pinned"), mustRead(t, filepath.Join(bin, "tuner-fault")))
			}, timeout: time.Second, want: "checksums did not match", planner: fails, start: fails, reload: fails},
		{name: "table without a configuration", tuner: binary("tuner-table"), flags: timeoutFlag, timeout: time.Second,
			want: "no configuration file", planner: fails, start: fails, reload: na},
		{name: "configuration is a directory", tuner: binary("tuner-rules"), config: "allreduce,0,65536,ring,simple,-1,-1,-1",
			flags: timeoutFlag, arm: func(t *testing.T, s *scene) {
				require.NoError(t, os.Remove(s.config))
				require.NoError(t, os.Mkdir(s.config, 0o755))
			}, timeout: time.Second, want: "a directory, not a configuration file", planner: refused, start: refused, reload: fails},
		{name: "configuration is a binary", tuner: binary("tuner-rules"), config: "allreduce,0,65536,ring,simple,-1,-1,-1",
			flags: timeoutFlag, arm: func(t *testing.T, s *scene) {
				replace(t, s.config, mustRead(t, "/bin/true"))
			}, timeout: time.Second, want: "a binary file, not a tuner configuration", planner: refused, start: refused, reload: fails},
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func mustReadFile(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return b
}

// silentListener accepts connections and never writes to them.
func silentListener(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// TestTunerFaults runs every fault in planner explain, collbench at start and collbench on a
// SIGHUP reload.
func TestTunerFaults(t *testing.T) {
	addr := silentListener(t)
	for _, f := range faults() {
		t.Run(f.name, func(t *testing.T) {
			for _, place := range []struct {
				name string
				run  func(t *testing.T, f fault, s *scene, env []string, tuner string)
				want outcome
			}{
				{"planner", runPlanner, f.planner},
				{"collbench start", runStart, f.start},
				{"collbench reload", runReload, f.reload},
			} {
				if place.want == na {
					continue
				}
				t.Run(place.name, func(t *testing.T) {
					s := &scene{dir: t.TempDir(), addr: addr}
					s.on = filepath.Join(s.dir, "on")
					// A short TMPDIR: the plugin's socket path must fit the kernel's 108 bytes.
					tmp, err := os.MkdirTemp("/tmp", "f")
					require.NoError(t, err)
					t.Cleanup(func() { os.RemoveAll(tmp) })
					marker := fmt.Sprintf("COLLPLAN_FAULT_CASE=%d-%s", os.Getpid(), strings.NewReplacer(" ", "_", "/", "_").Replace(t.Name()))
					env := append(os.Environ(), "TMPDIR="+tmp, marker)
					tuner := f.tuner(t, s)
					if f.config != "" {
						s.config = filepath.Join(s.dir, "tuner.conf")
						require.NoError(t, os.WriteFile(s.config, []byte(f.config+"\n"), 0o644))
					}
					f.want = wantFor(f, place.want)
					place.run(t, f, s, env, tuner)
					assertNothingLeft(t, marker, tmp)
				})
			}
		})
	}
}

// wantFor: a fault that is not one (works) expects nothing in particular.
func wantFor(f fault, o outcome) string {
	if o == works {
		return ""
	}
	return f.want
}

func tunerArgs(f fault, s *scene, tuner string) []string {
	args := []string{"--tuner", tuner}
	if s.config != "" {
		args = append(args, "--tuner-config", s.config)
	}
	if f.flags != nil {
		args = append(args, f.flags(s)...)
	}
	return args
}

// run runs a command to its end and returns its output, exit code and duration.
func run(t *testing.T, env []string, name string, args ...string) (stdout, stderr string, code int, took time.Duration) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s %q did not end within 60 s\nstdout:\n%s\nstderr:\n%s", name, args, out.String(), errb.String())
	}
	took = time.Since(start)
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	return out.String(), errb.String(), code, took
}

func runPlanner(t *testing.T, f fault, s *scene, env []string, tuner string) {
	if f.arm != nil {
		f.arm(t, s)
	}
	args := append([]string{"explain", "--node", "h100", "--coll", "allreduce", "--bytes", "1MiB"}, tunerArgs(f, s, tuner)...)
	out, stderr, code, took := run(t, env, "planner", args...)
	assert.LessOrEqual(t, took, f.timeout+f.within(), "returned within its deadline plus %s", f.within())
	switch f.planner {
	case works:
		assert.Equal(t, 0, code, "stderr:\n%s", stderr)
		assert.Contains(t, out, "   tuner: ")
		assert.NotContains(t, out, "note:")
	default:
		assert.Equal(t, 2, code, "exit status 2\nstdout:\n%s", out)
		assert.Empty(t, out)
		lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
		assert.Len(t, lines, 1, "one line:\n%s", stderr)
		assert.Contains(t, stderr, f.want)
	}
	t.Logf("planner: exit %d in %s: %s", code, took.Round(time.Millisecond), firstLine(stderr))
}

var benchArgs = []string{"allreduce", "-np", "2", "-b", "8", "-e", "8", "-n", "5", "-w", "1"}

func runStart(t *testing.T, f fault, s *scene, env []string, tuner string) {
	if f.arm != nil {
		f.arm(t, s)
	}
	// The same job without a tuner, just before: what the job itself costs on this host now (a
	// loaded CI machine starts processes slowly), so that what is bounded is the tuner's share.
	_, _, _, base := run(t, env, "collbench", benchArgs...)
	args := append(append([]string(nil), benchArgs...), tunerArgs(f, s, tuner)...)
	out, stderr, code, took := run(t, env, "collbench", args...)
	assert.LessOrEqual(t, took-base, f.timeout+f.within(), "returned within its deadline plus %s (beyond the %s the job takes without a tuner)", f.within(), base)
	plans := planLine(out)
	switch f.start {
	case works:
		assert.Equal(t, 0, code, "stderr:\n%s", stderr)
		assert.NotEmpty(t, plans, out)
		assert.NotContains(t, plans, "FALLBACK")
	case fails:
		assert.Equal(t, 0, code, "a long-running command falls back\nstderr:\n%s", stderr)
		assert.Contains(t, plans, "FALLBACK: ")
		assert.Contains(t, plans, f.want)
	case refused:
		assert.Equal(t, 2, code, "exit status 2\nstdout:\n%s", out)
		assert.Empty(t, out)
		assert.Len(t, strings.Split(strings.TrimRight(stderr, "\n"), "\n"), 1, "one line:\n%s", stderr)
		assert.Contains(t, stderr, f.want)
	}
	t.Logf("collbench start: exit %d in %s (%s without a tuner): %s", code, took.Round(time.Millisecond), base.Round(time.Millisecond), plans)
}

func planLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "# collbench transport:") {
			return l
		}
	}
	return ""
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lineCounter counts newlines of a stream it discards.
type lineCounter struct {
	mu sync.Mutex
	n  int
}

func (l *lineCounter) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.n += bytes.Count(p, []byte("\n"))
	l.mu.Unlock()
	return len(p), nil
}

func (l *lineCounter) lines() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func runReload(t *testing.T, f fault, s *scene, env []string, tuner string) {
	args := append(append(append([]string(nil), benchArgs...), "-N", "0"), tunerArgs(f, s, tuner)...)
	cmd := exec.Command(filepath.Join(bin, "collbench"), args...)
	cmd.Env = env
	var stdout lineCounter
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	wait := func(what string, d time.Duration, cond func() bool) bool {
		deadline := time.Now().Add(d)
		for !cond() {
			select {
			case err := <-exited:
				exited <- err
				t.Errorf("collbench exited (%v) while waiting for %s\nstderr:\n%s", err, what, stderr.String())
				return false
			default:
			}
			if time.Now().After(deadline) {
				t.Errorf("no %s within %s\nstderr:\n%s", what, d, stderr.String())
				return false
			}
			time.Sleep(10 * time.Millisecond)
		}
		return true
	}
	// Rows: the job runs, on its first policy.
	if !wait("rows", 30*time.Second, func() bool { return stdout.lines() > 30 }) {
		return
	}
	if f.arm != nil {
		f.arm(t, s)
	}
	kept := "SIGHUP: the new policy did not compile, keeping the old one"
	switched := "switched policy at sequence"
	sent := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	ok := wait("reload line", f.timeout+f.within(), func() bool {
		e := stderr.String()
		return strings.Contains(e, kept) || strings.Contains(e, "rank 0: "+switched)
	})
	took := time.Since(sent)
	if ok {
		e := stderr.String()
		switch f.reload {
		case works:
			assert.Contains(t, e, switched)
			assert.NotContains(t, e, kept)
		default:
			assert.Contains(t, e, kept)
			assert.Contains(t, lineWith(e, kept), f.want)
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		exited <- err
		assert.NoError(t, err, "collbench stops cleanly on SIGTERM\nstderr:\n%s", stderr.String())
	case <-time.After(10 * time.Second):
		t.Errorf("collbench did not stop within 10 s of SIGTERM\nstderr:\n%s", stderr.String())
	}
	t.Logf("collbench reload: reload line %s after SIGHUP: %s", took.Round(time.Millisecond), firstLine(lineWith(stderr.String(), "SIGHUP")))
}

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// assertNothingLeft checks that no process of the case is alive (found by the marker in its
// environment, which every descendant inherits, wherever it was reparented) and that the case's
// TMPDIR holds no plugin socket or directory. It kills and reaps what it finds, so that one case's
// leftovers do not fail the next.
func assertNothingLeft(t *testing.T, marker, tmp string) {
	t.Helper()
	var left []string
	deadline := time.Now().Add(2 * time.Second) // a killed group may take a moment to be reaped
	for {
		left = left[:0]
		for _, pid := range proctree.Marked(marker) {
			left = append(left, fmt.Sprintf("%d %s", pid, proctree.Cmdline(pid)))
		}
		reapOrphans()
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !assert.Empty(t, left, "processes left behind") {
		for _, pid := range proctree.Marked(marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
		reapOrphans()
	}
	ents, err := os.ReadDir(tmp)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Empty(t, names, "left in TMPDIR (plugin sockets and their directories)")
}

// reapOrphans reaps the zombies reparented to this process (it is their subreaper). Only processes
// whose parent is this one and that are zombies are waited for, by pid, so no exec.Cmd's wait is
// disturbed.
func reapOrphans() {
	ents, _ := os.ReadDir("/proc")
	me := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		ppid, zombie := -1, false
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			l := sc.Text()
			if v, ok := strings.CutPrefix(l, "PPid:"); ok {
				ppid, _ = strconv.Atoi(strings.TrimSpace(v))
			}
			if v, ok := strings.CutPrefix(l, "State:"); ok {
				zombie = strings.HasPrefix(strings.TrimSpace(v), "Z")
			}
		}
		f.Close()
		if ppid == me && zombie {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
	}
}
