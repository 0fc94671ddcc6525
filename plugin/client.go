package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
)

// Defaults of Config.
const (
	DefaultStartTimeout = 5 * time.Second
	DefaultCallTimeout  = 2 * time.Second
	DefaultBackoff      = time.Second
	maxBackoff          = time.Minute
)

// Config configures a Client. Zero values take the defaults.
type Config struct {
	// Path is the plugin binary (see Resolve).
	Path string
	// Name names the policy in explanations and logs; default: the binary's name less "tuner-".
	Name string
	// ConfigPath is handed to the plugin's Configure (made absolute); "" for none.
	ConfigPath string
	// StartTimeout bounds starting the plugin and its handshake (default 5 s); CallTimeout bounds
	// each call (default 2 s).
	StartTimeout, CallTimeout time.Duration
	// SHA256, when set, pins the binary: a plugin whose checksum differs is not started.
	SHA256 []byte
	// ConfigSHA256, when set, pins the configuration file the same way: a start (a restart after
	// a crash included) whose ConfigPath no longer holds those bytes is refused, so a plugin never
	// runs with a configuration other than the one it was opened with.
	ConfigSHA256 []byte
	// Logger receives the host's messages: a failure, once, with the plugin's stderr. Default:
	// warnings and errors to os.Stderr. go-plugin's own chatter goes to it only at debug level.
	Logger hclog.Logger
	// Backoff is the delay before the first restart after a failure (default 1 s); it doubles with
	// each failure in a row, up to a minute.
	Backoff time.Duration
}

// Client runs a tuner plugin and implements planner.Tuner over it. The plugin is started on the
// first call. When it crashes, hangs past the call deadline, never completes the handshake or
// answers with an invalid reply, the call returns an error (the planner then uses its built-in
// policy and notes why), the failure is logged once with the plugin's stderr, and the plugin is
// restarted on a later call, after a backoff. A Client is safe for concurrent use; Close ends the
// plugin.
type Client struct {
	cfg  Config
	log  hclog.Logger
	dial func(ctx context.Context) (*instance, error)

	startMu  sync.Mutex // serializes starts
	mu       sync.Mutex // guards the fields below and instance.dead
	cur      *instance
	failures int       // failures in a row
	retryAt  time.Time // no restart before this
	lastErr  error
	lastLog  string
	starts   atomic.Int64 // plugins started and configured
}

var _ planner.Tuner = (*Client)(nil)

// instance is one running plugin.
type instance struct {
	w      *wire
	stderr *tail
	exited func() bool
	// kill ends the plugin at once and waits (bounded) until its stderr is read.
	kill func()
	dead bool // a failure was handled

	r       *groupRunner     // the process (nil in TestClient)
	conn    *grpc.ClientConn // the connection (nil in TestClient)
	endOnce sync.Once
	stuck   bool // the process was not reaped within exitWait of its SIGKILL
}

// New returns a client for the plugin at cfg.Path; nothing starts until the first call.
func New(cfg Config) (*Client, error) {
	if cfg.Path == "" {
		return nil, fmt.Errorf("plugin: no plugin path")
	}
	fi, err := os.Stat(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("plugin: %w", err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("plugin: %s is not an executable file", cfg.Path)
	}
	if cfg.SHA256 != nil && len(cfg.SHA256) != sha256.Size {
		return nil, fmt.Errorf("plugin: sha256 pin has %d bytes, want %d", len(cfg.SHA256), sha256.Size)
	}
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	c.dial = c.dialProcess
	return c, nil
}

func newClient(cfg Config) (*Client, error) {
	if cfg.Name == "" {
		cfg.Name = strings.TrimPrefix(filepath.Base(cfg.Path), "tuner-")
	}
	if cfg.ConfigPath != "" {
		abs, err := filepath.Abs(cfg.ConfigPath)
		if err != nil {
			return nil, fmt.Errorf("plugin: config: %w", err)
		}
		cfg.ConfigPath = abs
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	log := cfg.Logger
	if log == nil {
		log = DefaultLogger(os.Stderr, hclog.Warn)
	}
	return &Client{cfg: cfg, log: log.With("tuner", cfg.Name)}, nil
}

// DefaultLogger is the host's logger: plain text to w at level and above.
func DefaultLogger(w io.Writer, level hclog.Level) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "tuner", Output: w, Level: level})
}

// EnvLogVar sets the host's tuner log level: trace, debug, info, warn (the default), error or off.
const EnvLogVar = "COLLPLAN_TUNER_LOG"

// EnvLogger is DefaultLogger at the level EnvLogVar names (warn when unset); an unknown level is an
// error naming the variable.
func EnvLogger(w io.Writer) (hclog.Logger, error) {
	level := hclog.Warn
	if v := os.Getenv(EnvLogVar); v != "" {
		if level = hclog.LevelFromString(v); level == hclog.NoLevel {
			return nil, fmt.Errorf("%s=%q: want trace, debug, info, warn, error or off", EnvLogVar, v)
		}
	}
	return DefaultLogger(w, level), nil
}

// Name is the policy's name.
func (c *Client) Name() string { return c.cfg.Name }

// Close ends the plugin if it runs.
func (c *Client) Close() error {
	c.mu.Lock()
	inst := c.cur
	c.cur = nil
	c.mu.Unlock()
	if inst != nil {
		inst.kill()
		if inst.stuck {
			c.log.Warn("tuner process did not exit within its kill wait; leaving it", "pid", inst.r.ID(), "wait", exitWait)
		}
	}
	return nil
}

// Tune asks the plugin for a class; the menu is taken as priced with NCCL's default constants
// (Planner binds the constants a planner really uses).
func (c *Client) Tune(ctx context.Context, req *planner.Request) ([]planner.Interval, error) {
	k := costmodel.DefaultConstants()
	return c.tune(ctx, req, &k)
}

func (c *Client) tune(ctx context.Context, req *planner.Request, k *costmodel.Constants) ([]planner.Interval, error) {
	var ivs []planner.Interval
	err := c.call(ctx, "tune", func(ctx context.Context, w *wire) error {
		var err error
		ivs, err = w.tune(ctx, req, k)
		return err
	})
	return ivs, err
}

// Init asks the plugin for its model replacements for a topology (NCCL's v5 init constants).
func (c *Client) Init(ctx context.Context, t *capabilities.Topology, host Model) (Model, error) {
	var m Model
	err := c.call(ctx, "init", func(ctx context.Context, w *wire) error {
		var err error
		m, err = w.init(ctx, t, host)
		return err
	})
	return m, err
}

// Planner builds a planner for t whose tuner is the plugin: one Init round trip, whose replacement
// constants and corrections (if any) the planner prices with, then planner.New. When Init fails,
// the planner keeps cfg's model and every class falls back to the built-in policy with the reason
// in its note.
func (c *Client) Planner(ctx context.Context, t *capabilities.Topology, cfg planner.Config) (*planner.Planner, error) {
	host := Model{Constants: cfg.Constants, Factors: cfg.Factors}
	if host.Constants == nil {
		k := costmodel.DefaultConstants()
		host.Constants = &k
	}
	if host.Factors == nil {
		host.Factors = correction.Default(t)
	}
	b := &bound{c: c, k: *host.Constants}
	cfg.Constants, cfg.Factors, cfg.Tuner = host.Constants, host.Factors, b
	m, err := c.Init(ctx, t, host)
	if err != nil {
		b.err = err
		return planner.New(t, cfg)
	}
	tuned := cfg
	if m.Constants != nil {
		tuned.Constants = m.Constants
	}
	if m.Factors != nil {
		tuned.Factors = m.Factors
	}
	pl, err := planner.New(t, tuned)
	if err != nil {
		b.err = fmt.Errorf("init: the plugin's model does not build: %w", err)
		c.logOnce(b.err.Error(), "init answer refused; using the host's model", "error", err)
		return planner.New(t, cfg)
	}
	b.k = *tuned.Constants
	return pl, nil
}

// bound is the client as one planner's tuner: it knows the constants that planner prices with.
type bound struct {
	c   *Client
	k   costmodel.Constants
	err error // Init failed: every class falls back
}

func (b *bound) Name() string { return b.c.Name() }

func (b *bound) Tune(ctx context.Context, req *planner.Request) ([]planner.Interval, error) {
	if b.err != nil {
		return nil, b.err
	}
	return b.c.tune(ctx, req, &b.k)
}

// call runs one RPC on a running plugin under the call deadline and sorts out failures.
func (c *Client) call(ctx context.Context, op string, f func(context.Context, *wire) error) error {
	inst, err := c.instance(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	err = f(cctx, inst.w)
	switch {
	case err == nil:
		c.mu.Lock()
		c.failures = 0
		c.mu.Unlock()
		return nil
	case ctx.Err() != nil: // the caller gave up; not the plugin's fault
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
	err = c.describe(err)
	if !isFault(err) {
		err = fmt.Errorf("%s: %w", op, err)
		c.logOnce(err.Error(), "tuner refused the call; using the built-in policy", "error", err)
		return err
	}
	return c.fault(inst, op, err)
}

// isFault says whether an error means the plugin itself is broken (crash, hang, panic, garbage):
// it is then killed and restarted later. A policy's own error (bad request, no answer for a class)
// leaves it running.
func isFault(err error) bool {
	var ir *invalidReply
	if errors.As(err, &ir) {
		return true
	}
	st, ok := status.FromError(err)
	if !ok {
		return true
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.Unknown, codes.NotFound, codes.OutOfRange:
		return false
	}
	return true
}

// describe makes an RPC error readable: what happened in words, then gRPC's code and message.
func (c *Client) describe(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.DeadlineExceeded:
		return fmt.Errorf("no answer within %s: %w", c.cfg.CallTimeout, rpcError{st})
	case codes.Unavailable:
		return fmt.Errorf("plugin died or dropped the connection: %w", rpcError{st})
	}
	return rpcError{st}
}

// rpcError prints a gRPC status as "message (Code)" and keeps it for status.FromError.
type rpcError struct{ st *status.Status }

func (e rpcError) Error() string              { return fmt.Sprintf("%s (%s)", e.st.Message(), e.st.Code()) }
func (e rpcError) GRPCStatus() *status.Status { return e.st }

// instance returns the running plugin, starting it when none runs and the backoff has passed.
// Starts are serialized; calls on a running plugin are not.
func (c *Client) instance(ctx context.Context) (*instance, error) {
	c.startMu.Lock()
	defer c.startMu.Unlock()
	c.mu.Lock()
	cur, retryAt, lastErr := c.cur, c.retryAt, c.lastErr
	c.mu.Unlock()
	if cur != nil {
		if !cur.exited() {
			return cur, nil
		}
		return nil, c.fault(cur, "call", errors.New("plugin exited between calls"))
	}
	if now := time.Now(); now.Before(retryAt) {
		return nil, fmt.Errorf("plugin down after %v; next start in %s", lastErr, retryAt.Sub(now).Round(time.Millisecond))
	}
	inst, err := c.dial(ctx)
	if err != nil {
		return nil, c.fault(nil, "start", err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	if _, err := inst.w.configure(cctx, c.cfg.ConfigPath); err != nil {
		return nil, c.fault(inst, "configure", c.describe(err))
	}
	c.mu.Lock()
	c.cur = inst
	c.mu.Unlock()
	c.starts.Add(1)
	return inst, nil
}

// Starts is how many times the plugin was started and configured: 1 after the first call, one
// more for each restart after a failure.
func (c *Client) Starts() int64 { return c.starts.Load() }

// fault kills a broken plugin, schedules its restart, logs the failure once with the plugin's
// stderr and returns the error the planner notes (with the telling line of the plugin's stderr).
func (c *Client) fault(inst *instance, op string, err error) error {
	out := fmt.Errorf("%s: %w", op, err)
	var stderr string
	if inst != nil {
		c.mu.Lock()
		handled := inst.dead
		inst.dead = true
		c.mu.Unlock()
		if handled { // a concurrent call already reported this plugin
			return out
		}
		inst.kill() // waits until its stderr is read
		stderr = inst.stderr.String()
	} else if se := (*startError)(nil); errors.As(err, &se) {
		stderr = se.stderr.String()
	}
	c.mu.Lock()
	if c.cur == inst {
		c.cur = nil
	}
	c.failures++
	d := c.cfg.Backoff << min(c.failures-1, 16)
	if d > maxBackoff || d <= 0 {
		d = maxBackoff
	}
	c.retryAt = time.Now().Add(d)
	c.lastErr = out
	c.mu.Unlock()
	args := []any{"error", out, "restart_in", d}
	if stderr != "" {
		args = append(args, "stderr", stderr)
	}
	c.logOnce(out.Error(), "tuner failed; using the built-in policy", args...)
	if line := summary(stderr); line != "" {
		return fmt.Errorf("%w (plugin stderr: %s)", out, line)
	}
	return out
}

// logOnce logs at warn level unless the same message was the last one logged.
func (c *Client) logOnce(key, msg string, args ...any) {
	c.mu.Lock()
	dup := c.lastLog == key
	c.lastLog = key
	c.mu.Unlock()
	if !dup {
		c.log.Warn(msg, args...)
	}
}

// startError is a failed start with what the plugin wrote to stderr.
type startError struct {
	err    error
	stderr *tail
}

func (e *startError) Error() string { return e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

// dialProcess starts the plugin binary in a process group of its own (groupRunner) and completes
// go-plugin's handshake and the gRPC connection, all within StartTimeout: a plugin that never
// prints its handshake, names an address that accepts and never answers, or forks without end
// costs the host its start deadline, then its whole group is killed. (go-plugin alone waited up to
// 20 s for a gRPC connection after the handshake, and its Kill waited for the plugin's stdout
// reader as long as any descendant held the pipe.)
func (c *Client) dialProcess(context.Context) (*instance, error) {
	stderr := newTail(32 << 10)
	if c.cfg.SHA256 != nil {
		if err := checkSum(c.cfg.Path, c.cfg.SHA256); err != nil {
			return nil, &startError{err: err, stderr: stderr}
		}
	}
	if c.cfg.ConfigSHA256 != nil && c.cfg.ConfigPath != "" {
		if err := checkSum(c.cfg.ConfigPath, c.cfg.ConfigSHA256); err != nil {
			return nil, &startError{err: fmt.Errorf("configuration changed since the tuner was opened: %w", err), stderr: stderr}
		}
	}
	timeout := c.cfg.StartTimeout
	pl := hclog.NewNullLogger()
	if c.log.IsDebug() {
		pl = c.log.Named("go-plugin")
	}
	g := &startGuard{}
	pc := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: versionedPlugins(nil),
		RunnerFunc: func(_ hclog.Logger, spec *exec.Cmd, socketDir string) (runner.Runner, error) {
			return g.runner(newGroupRunner(c.cfg.Path, spec, socketDir))
		},
		UnixSocketConfig: &goplugin.UnixSocketConfig{TempDir: socketBase()},
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		StartTimeout:     timeout,
		Logger:           pl,
		Stderr:           stderr,
		SyncStdout:       io.Discard,
		SyncStderr:       stderr,
		// gRPC's own connect timeout (20 s by default) must not outlast the start deadline.
		GRPCDialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.DefaultConfig, MinConnectTimeout: timeout})},
	})
	type dialed struct {
		w    *wire
		conn *grpc.ClientConn
		err  error
	}
	done := make(chan dialed, 1)
	deadline := time.Now().Add(timeout)
	go func() {
		w, conn, err := connect(pc, deadline)
		if g.abandon(conn) {
			return // the host gave up and killed the plugin; conn is closed
		}
		done <- dialed{w, conn, err}
	}()
	// go-plugin's own start timer (the handshake) runs from slightly later; its more telling error
	// comes first unless the wait is past the handshake.
	t := time.NewTimer(timeout + 250*time.Millisecond)
	defer t.Stop()
	var d dialed
	select {
	case d = <-done:
	case <-t.C:
		d.err = fmt.Errorf("timeout while waiting for plugin to start: no gRPC connection within %s", timeout)
		if g.abandon(nil) {
			select { // it finished after all, in the meantime
			case d = <-done:
			default:
			}
		}
	}
	inst := &instance{w: d.w, stderr: stderr, conn: d.conn, r: g.get()}
	inst.exited = inst.hasExited
	inst.kill = inst.end
	if d.err != nil {
		inst.end()
		return nil, &startError{err: startProblem(d.err, c.cfg.Path), stderr: stderr}
	}
	return inst, nil
}

// startProblem makes a failed start one line. go-plugin's message for a plugin that printed
// something other than its handshake spans lines (what it read, then a diagnosis).
func startProblem(err error, path string) error {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "Unrecognized remote plugin message: "); ok {
		got, _, _ := strings.Cut(rest, "\n")
		if got == "" {
			return fmt.Errorf("%s exited without printing go-plugin's handshake line: is it a collplan tuner (built with plugin.Serve)?", path)
		}
		return fmt.Errorf("%s printed %q instead of go-plugin's handshake line: is it a collplan tuner (built with plugin.Serve)?", path, got)
	}
	if strings.ContainsRune(msg, '\n') {
		return fmt.Errorf("%s", strings.Join(strings.Fields(msg), " "))
	}
	return err
}

// socketBase is where the plugin's socket directory is made: os.TempDir(), unless a socket path
// in it would pass the kernel's limit of 108 bytes (sun_path), as under a test's long TMPDIR;
// then /tmp. go-plugin makes BASE/plugin-dirNNNNNNNNNN/pluginNNNNNNNNNN (up to 39 bytes more).
func socketBase() string {
	if d := os.TempDir(); len(d)+40 < 108 {
		return d
	}
	return "/tmp"
}

// connect completes go-plugin's handshake, dispenses the tuner and waits, until deadline, for the
// gRPC connection to be ready.
func connect(pc *goplugin.Client, deadline time.Time) (*wire, *grpc.ClientConn, error) {
	rpc, err := pc.Client()
	if err != nil {
		return nil, nil, err
	}
	gc, ok := rpc.(*goplugin.GRPCClient)
	if !ok {
		return nil, nil, fmt.Errorf("dispense: unexpected protocol client %T", rpc)
	}
	raw, err := rpc.Dispense(PluginName)
	if err != nil {
		return nil, gc.Conn, fmt.Errorf("dispense: %w", err)
	}
	w, ok := raw.(*wire)
	if !ok {
		return nil, gc.Conn, fmt.Errorf("dispense: unexpected %T", raw)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	conn := gc.Conn
	conn.Connect()
	for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
		if st == connectivity.Shutdown {
			return nil, conn, errors.New("gRPC connection to the plugin shut down")
		}
		if !conn.WaitForStateChange(ctx, st) {
			return nil, conn, fmt.Errorf("timeout while waiting for plugin to start: the gRPC connection to the address of its handshake is %s", strings.ToLower(st.String()))
		}
	}
	return w, conn, nil
}

// startGuard hands the runner go-plugin builds over to the host and lets the host give up a
// start that outlasts the deadline without leaking a process: a runner built after the host gave
// up is refused, one built before is killed, and a connection made after it is closed.
type startGuard struct {
	mu        sync.Mutex
	r         *groupRunner
	abandoned bool
}

func (g *startGuard) runner(r *groupRunner) (runner.Runner, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abandoned {
		return nil, errors.New("the host gave up starting the plugin")
	}
	g.r = r
	return r, nil
}

func (g *startGuard) get() *groupRunner {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.r
}

// abandon is called by the host when it gives up (conn nil) and by the dialing goroutine when it
// is done (its connection, if any). It reports whether the start was abandoned: the first caller
// wins; the second finds it so and, when it is the dialing goroutine, closes its connection.
func (g *startGuard) abandon(conn *grpc.ClientConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.abandoned {
		if conn != nil {
			_ = conn.Close()
		}
		return true
	}
	g.abandoned = true
	return false
}

// FileSHA256 is the SHA-256 of the file at path (a tuner binary, to pin it).
func FileSHA256(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checksum: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("checksum of %s: %w", path, err)
	}
	return h.Sum(nil), nil
}

// checkSum compares the binary at path with a SHA-256 pin.
func checkSum(path string, want []byte) error {
	got, err := FileSHA256(path)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s: checksums did not match: sha256 %x, pinned %x", path, got, want)
	}
	return nil
}

// hasExited reports whether the plugin process is gone.
func (i *instance) hasExited() bool { return i.r == nil || i.r.hasExited() }

// end kills the plugin's process group, closes the connection, waits (bounded) for the process
// to be reaped and its stderr to be read to the end, and removes its socket directory. It never
// waits for the plugin's cooperation: the plugin has no state the host needs.
func (i *instance) end() {
	i.endOnce.Do(func() {
		r := i.r
		if r != nil {
			_ = r.Kill(context.Background())
		}
		if i.conn != nil {
			_ = i.conn.Close()
		}
		if r == nil || !r.wasStarted() {
			return // nothing ran (the start was given up before the process started)
		}
		if !r.exitedWithin(exitWait) {
			i.stuck = true
		}
		if r.stderr != nil {
			r.stderr.readWithin(drainTime + 100*time.Millisecond)
		}
		if r.socketDir != "" {
			_ = os.RemoveAll(r.socketDir)
		}
	})
}

// Resolve finds a tuner binary for --tuner: a value with a path separator is a path; a bare NAME
// is tuner-NAME beside the running executable, then on PATH. "none" (any case) and "" give "".
func Resolve(s string) (string, error) {
	if s == "" || strings.EqualFold(s, "none") {
		return "", nil
	}
	if strings.ContainsRune(s, os.PathSeparator) || strings.ContainsRune(s, '/') {
		return s, nil
	}
	name := s
	if !strings.HasPrefix(name, "tuner-") {
		name = "tuner-" + name
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("plugin: tuner %q not found: no executable %s beside this program or on PATH; %s", s, name, BuildHint)
}

// BuildHint says how to get the tuner binaries where Resolve finds them. Under `go run` the
// program runs from the build cache, where no tuner is beside it.
const BuildHint = "build the tuners with `go build -o bin/ ./cmd/...` and run bin/planner, bin/collbench (they find bin/tuner-NAME), or put bin on PATH"
