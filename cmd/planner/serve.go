package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/service"
	"github.com/collplan/collplan/service/web"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// serveFlags are planner serve's flags, parsed into a service.Config.
type serveFlags struct {
	cfg        service.Config
	topologies listFlag
	tables     listFlag
	tuners     listFlag
	tuner      plugin.Spec // --tuner-config, --tuner-timeout, --tuner-sha256: for every --tuner
}

// runServe is planner serve: flags -> service.Config -> Serve until SIGTERM or SIGINT (then it
// drains); SIGHUP reloads the topologies and tuners.
func runServe(ctx context.Context, args []string, stderr io.Writer, started func(addr string)) error {
	fs := newFlagSet("serve", stderr)
	var f serveFlags
	c := &f.cfg
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:7480", "address to listen on; a non-loopback one needs --token-file, --tls-cert and --tls-key")
	fs.Var(&f.tables, "table", "node table file (TOML) that queries name as node by its table name, with the fitted overlay beside it (repeatable; a reload reads it again)")
	fs.Var(&f.topologies, "topology", "topology file (TOML) that queries name by its base name less .toml (repeatable)")
	fs.Var(&f.tuners, "tuner", "tuner plugin queries may name: a NAME (tuner-NAME beside this binary, then on PATH) or a PATH (repeatable); named by the binary's name less tuner-")
	fs.StringVar(&f.tuner.Config, "tuner-config", "", "configuration file handed to the tuner plugin (with one --tuner)")
	fs.DurationVar(&f.tuner.Timeout, "tuner-timeout", 0, "tuner start and per-call deadline (default 5s to start, 2s per call): past it, the built-in policy answers and says so")
	fs.StringVar(&f.tuner.SHA256, "tuner-sha256", "", "pin the tuner binary to this SHA-256 (hex; with one --tuner)")
	fs.StringVar(&c.TokenFile, "token-file", "", "file holding the bearer token every request but /healthz and /readyz must carry (required off loopback)")
	fs.StringVar(&c.AdminTokenFile, "admin-token-file", "", "file holding the token of POST /v1/admin/reload (Collplan-Admin-Token header); without it admin endpoints are off")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "TLS certificate file (PEM; required off loopback)")
	fs.StringVar(&c.TLSKey, "tls-key", "", "TLS key file (PEM; required off loopback)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", 4<<20, "largest request body (413 beyond)")
	fs.IntVar(&c.MaxBatch, "max-batch", 10000, "most queries in one batch (413 beyond)")
	fs.IntVar(&c.MaxHeaderBytes, "max-header-bytes", 16<<10, "largest request header block (431 beyond)")
	fs.DurationVar(&c.ReadHeaderTimeout, "read-header-timeout", 0, "time to read a request's headers (default 5s)")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", 0, "time to read a whole request (default 30s)")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", 0, "time to write an answer (default 60s)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", 0, "keep-alive idle time (default 120s)")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 0, "at SIGTERM, time requests in flight get to finish (default 30s)")
	fs.IntVar(&c.MaxCompiles, "max-compiles", 0, "classes priced (and sent to the tuner) at once; 0: the CPU count")
	fs.IntVar(&c.CompileQueue, "compile-queue", 64, "requests waiting for a compile turn (429 beyond)")
	fs.IntVar(&c.CacheClasses, "cache-classes", 16384, "priced classes kept (LRU)")
	fs.IntVar(&c.CachePlanners, "cache-planners", 1024, "planners kept, one per topology and tuner (LRU)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// service.Config takes a zero as "the default"; on the command line a zero or a negative
	// limit is an error, never a silent default.
	for _, l := range []struct {
		name string
		v    int64
	}{{"--max-body-bytes", c.MaxBodyBytes}, {"--max-batch", int64(c.MaxBatch)}, {"--max-header-bytes", int64(c.MaxHeaderBytes)},
		{"--compile-queue", int64(c.CompileQueue)}, {"--cache-classes", int64(c.CacheClasses)}, {"--cache-planners", int64(c.CachePlanners)}} {
		if l.v < 1 {
			return usagef("--%s %d: must be at least 1", strings.TrimPrefix(l.name, "--"), l.v)
		}
	}
	if c.MaxCompiles < 0 {
		return usagef("--max-compiles %d: must be at least 1 (0: the CPU count)", c.MaxCompiles)
	}
	if len(f.tuners) != 1 && (f.tuner.Config != "" || f.tuner.SHA256 != "") {
		return usagef("--tuner-config and --tuner-sha256 need exactly one --tuner")
	}
	c.Topologies, c.Tables = f.topologies, f.tables
	for _, t := range f.tuners {
		sp := f.tuner
		sp.Name = t
		c.Tuners = append(c.Tuners, sp)
	}
	c.Log = stderr
	c.Assets = web.FS // the crossover map at / (service/web)
	srv, err := service.New(*c)
	if err != nil {
		return usageError{err}
	}
	defer srv.Close()
	ln, err := srv.Listen()
	if err != nil {
		return usageError{err}
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_, _ = srv.Reload() // Reload logs the outcome; a failure keeps the old set
			}
		}
	}()
	scheme := "http"
	if c.TLSCert != "" {
		scheme = "https"
	}
	fmt.Fprintf(stderr, "planner: serve: listening on %s://%s\n", scheme, ln.Addr())
	if started != nil {
		started(ln.Addr().String())
	}
	return srv.Serve(ctx, ln)
}
