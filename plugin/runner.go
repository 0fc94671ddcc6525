package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin/runner"
)

// drainTime is how long the host keeps reading a plugin's stdout and stderr after its process
// group was killed. Whatever the plugin wrote before it died is in the pipe and is read at once;
// the bound only matters when a descendant that left the group (setsid) still holds the pipe, which
// would otherwise keep go-plugin's readers, and every wait on them, blocked for as long as it lives.
const drainTime = 500 * time.Millisecond

// exitWait bounds how long killing a plugin waits for its process to be reaped. SIGKILL ends a
// process at once unless it is in an uninterruptible sleep; the host then stops waiting and says so.
const exitWait = 2 * time.Second

// groupRunner is go-plugin's runner for a plugin process that the host owns whole: the plugin
// starts in a process group of its own, so that killing the group ends every process it started
// (a shell script's `sleep`, a tuner's background child, a fork bomb) and not only the first one;
// its stdout and stderr are pipes whose reads end drainTime after the kill even when a descendant
// that escaped the group keeps them open; its standard input is /dev/null (a plugin never reads
// the host's stdin, which is planner query's input); and its exit is seen by a reaper of our own,
// independently of the pipes. go-plugin's own runner waits for the pipes to close before it
// reaps the process, so a grandchild holding stdout kept a dead plugin "running", and Kill waited
// for it forever.
type groupRunner struct {
	cmd       *exec.Cmd
	path      string
	socketDir string // go-plugin's directory for the plugin's unix socket (PLUGIN_UNIX_SOCKET_DIR)

	stdout, stderr *pipeReader

	mu      sync.Mutex // orders kills against the reap: the group id is valid until reaped
	started bool
	reaped  bool
	killed  bool
	exited  chan struct{} // closed once the process is reaped
	waitErr error
}

var _ runner.Runner = (*groupRunner)(nil)

// newGroupRunner builds the runner for the plugin at path from go-plugin's command spec (whose
// environment carries the handshake variables).
func newGroupRunner(path string, spec *exec.Cmd, socketDir string) *groupRunner {
	cmd := exec.Command(path)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	cmd.SysProcAttr = groupAttr()
	return &groupRunner{cmd: cmd, path: path, socketDir: socketDir, exited: make(chan struct{})}
}

func (r *groupRunner) Start(context.Context) error {
	r.mu.Lock() // a Kill that came first wins: nothing starts after it
	defer r.mu.Unlock()
	if r.killed {
		return errors.New("the host gave up starting the plugin")
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("plugin stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return fmt.Errorf("plugin stderr pipe: %w", err)
	}
	r.cmd.Stdout, r.cmd.Stderr = outW, errW
	err = r.cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	r.stdout, r.stderr = newPipeReader(outR), newPipeReader(errR)
	r.started = true
	go r.reap()
	return nil
}

// reap waits for the plugin process to exit, kills what is left of its group (a plugin that
// exits leaves nothing behind), lets the pipes drain and reaps it. The kill comes before the reap
// so that the group id, the plugin's pid, cannot have been reused.
func (r *groupRunner) reap() {
	waitExit(r.cmd.Process.Pid)
	r.mu.Lock()
	if groupKill {
		killGroup(r.cmd.Process)
	}
	r.waitErr = r.cmd.Wait()
	r.reaped = true
	r.mu.Unlock()
	r.drain()
	close(r.exited)
}

// Kill ends the plugin's whole process group and bounds the pipes' remaining reads.
func (r *groupRunner) Kill(context.Context) error {
	r.mu.Lock()
	if r.started && !r.reaped {
		killGroup(r.cmd.Process)
	}
	r.killed = true
	r.mu.Unlock()
	r.drain()
	return nil
}

func (r *groupRunner) drain() {
	if r.wasStarted() {
		r.stdout.endBy(time.Now().Add(drainTime))
		r.stderr.endBy(time.Now().Add(drainTime))
	}
}

// wasStarted reports whether the process was started.
func (r *groupRunner) wasStarted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started
}

// Wait waits for the process to be reaped.
func (r *groupRunner) Wait(context.Context) error {
	<-r.exited
	return r.waitErr
}

// exitedWithin reports whether the process was reaped within d.
func (r *groupRunner) exitedWithin(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.exited:
		return true
	case <-t.C:
		return false
	}
}

// hasExited reports whether the process was reaped.
func (r *groupRunner) hasExited() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

func (r *groupRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *groupRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *groupRunner) Name() string          { return r.path }

func (r *groupRunner) ID() string {
	if r.cmd.Process == nil {
		return ""
	}
	return fmt.Sprint(r.cmd.Process.Pid)
}

func (r *groupRunner) Diagnose(context.Context) string {
	return fmt.Sprintf("the plugin %s did not print go-plugin's handshake line: is it a collplan tuner (built with plugin.Serve), for this architecture, and executable?", r.path)
}

// PluginToHost and HostToPlugin: the plugin runs on this host, so addresses are the same on both
// sides.
func (r *groupRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *groupRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// pipeReader is the read end of a plugin's stdout or stderr pipe. done is closed when a read
// returned an error (EOF, or the drain deadline), so the host knows the plugin's output has been
// read to the end.
type pipeReader struct {
	f    *os.File
	once sync.Once
	done chan struct{}
}

func newPipeReader(f *os.File) *pipeReader { return &pipeReader{f: f, done: make(chan struct{})} }

func (p *pipeReader) Read(b []byte) (int, error) {
	n, err := p.f.Read(b)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = io.EOF // the drain ended: the rest, if any, is a descendant's
		}
		p.once.Do(func() { close(p.done) })
	}
	return n, err
}

// endBy makes reads end at t at the latest (os.Pipe's files are pollable, so the deadline holds).
func (p *pipeReader) endBy(t time.Time) { _ = p.f.SetReadDeadline(t) }

func (p *pipeReader) Close() error { return p.f.Close() }

// readWithin reports whether the pipe was read to its end within d.
func (p *pipeReader) readWithin(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}
