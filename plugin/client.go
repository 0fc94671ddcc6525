package plugin

import (
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
	"time"

	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
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
}

var _ planner.Tuner = (*Client)(nil)

// instance is one running plugin.
type instance struct {
	w      *wire
	stderr *tail
	exited func() bool
	// kill ends the plugin at once and waits until its stderr is read.
	kill func()
	dead bool // a failure was handled
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
	return inst, nil
}

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

// dialProcess starts the plugin binary and completes go-plugin's handshake.
func (c *Client) dialProcess(context.Context) (*instance, error) {
	stderr := newTail(32 << 10)
	cmd := exec.Command(c.cfg.Path)
	var sec *goplugin.SecureConfig
	if c.cfg.SHA256 != nil {
		sec = &goplugin.SecureConfig{Checksum: c.cfg.SHA256, Hash: sha256.New()}
	}
	pl := hclog.NewNullLogger()
	if c.log.IsDebug() {
		pl = c.log.Named("go-plugin")
	}
	pc := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: versionedPlugins(nil),
		Cmd:              cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		StartTimeout:     c.cfg.StartTimeout,
		SecureConfig:     sec,
		Logger:           pl,
		Stderr:           stderr,
		SyncStdout:       io.Discard,
		SyncStderr:       stderr,
	})
	kill := func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
		pc.Kill()
	}
	rpc, err := pc.Client()
	if err != nil {
		kill()
		return nil, &startError{err: err, stderr: stderr}
	}
	raw, err := rpc.Dispense(PluginName)
	if err != nil {
		kill()
		return nil, &startError{err: fmt.Errorf("dispense: %w", err), stderr: stderr}
	}
	w, ok := raw.(*wire)
	if !ok {
		kill()
		return nil, &startError{err: fmt.Errorf("dispense: unexpected %T", raw), stderr: stderr}
	}
	return &instance{w: w, stderr: stderr, exited: pc.Exited, kill: kill}, nil
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
	var tried []string
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
		tried = append(tried, filepath.Dir(exe))
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	tried = append(tried, "PATH")
	return "", fmt.Errorf("plugin: tuner %q not found: no executable %s in %s", s, name, strings.Join(tried, " or "))
}
