package service

import (
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"
	"time"

	"github.com/collplan/collplan/plugin"
)

// Config configures a Server. Zero values take the defaults documented per field (the flags of
// planner serve, which README.md lists).
type Config struct {
	// Listen is the address to listen on (default 127.0.0.1:7480). A non-loopback address needs
	// TokenFile, TLSCert and TLSKey.
	Listen string
	// Tables are node table files (TOML) a query can name (node) by their table name, each with
	// the fitted overlay beside it (NAME.fit.toml) unless the query says no_overlay; a reload
	// reads them again.
	Tables []string
	// Topologies are topology files (TOML) a query can name by their base name less ".toml".
	Topologies []string
	// Tuners are the tuner plugins a query can name (by the client's name: the binary's less
	// "tuner-"); no request names a binary or a path.
	Tuners []plugin.Spec
	// TokenFile holds the bearer token every request but /healthz and /readyz must carry
	// (compared in constant time). Required off loopback; optional on it.
	TokenFile string
	// AdminTokenFile holds the token of the admin endpoints (POST /v1/admin/reload); without one
	// they are off.
	AdminTokenFile string
	// TLSCert and TLSKey serve HTTPS; required off loopback.
	TLSCert, TLSKey string
	// MaxBodyBytes bounds a request body (default 4 MiB); MaxBatch the queries of one batch
	// (default 10,000); MaxHeaderBytes the request headers (default 16 KiB).
	MaxBodyBytes   int64
	MaxBatch       int
	MaxHeaderBytes int
	// ReadHeaderTimeout (default 5 s), ReadTimeout (default 30 s), WriteTimeout (default 60 s) and
	// IdleTimeout (default 120 s) bound each connection; DrainTimeout (default 30 s) bounds the
	// wait for requests in flight at shutdown.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout, DrainTimeout time.Duration
	// MaxCompiles bounds the classes priced (and sent to the tuner) at once (default the CPU
	// count); CompileQueue the requests waiting for a turn (default 64). A request beyond the
	// queue is refused with 429.
	MaxCompiles, CompileQueue int
	// CacheClasses bounds the priced classes kept (LRU, default 16,384); CachePlanners the
	// planners (one per topology and tuner, default 1,024).
	CacheClasses, CachePlanners int
	// Assets, when set, is served at / (the web map).
	Assets fs.FS
	// Log receives the service's log lines (default os.Stderr).
	Log io.Writer
}

// withDefaults fills the zero values.
func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	dur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7480"
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 4 << 20
	}
	def(&c.MaxBatch, 10000)
	def(&c.MaxHeaderBytes, 16<<10)
	def(&c.MaxCompiles, max(1, numCPU()))
	def(&c.CompileQueue, 64)
	def(&c.CacheClasses, 16384)
	def(&c.CachePlanners, 1024)
	dur(&c.ReadHeaderTimeout, 5*time.Second)
	dur(&c.ReadTimeout, 30*time.Second)
	dur(&c.WriteTimeout, 60*time.Second)
	dur(&c.IdleTimeout, 120*time.Second)
	dur(&c.DrainTimeout, 30*time.Second)
	if c.Log == nil {
		c.Log = os.Stderr
	}
	return c
}

// check refuses what cannot work: negative limits, and a non-loopback address without a token
// and TLS. Every error names the flag.
func (c *Config) check() error {
	for _, l := range []struct {
		name string
		v    int64
	}{{"--max-body-bytes", c.MaxBodyBytes}, {"--max-batch", int64(c.MaxBatch)}, {"--max-header-bytes", int64(c.MaxHeaderBytes)},
		{"--max-compiles", int64(c.MaxCompiles)}, {"--compile-queue", int64(c.CompileQueue)},
		{"--cache-classes", int64(c.CacheClasses)}, {"--cache-planners", int64(c.CachePlanners)}} {
		if l.v < 1 {
			return fmt.Errorf("%s %d: must be at least 1", l.name, l.v)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--read-header-timeout", c.ReadHeaderTimeout}, {"--read-timeout", c.ReadTimeout}, {"--write-timeout", c.WriteTimeout},
		{"--idle-timeout", c.IdleTimeout}, {"--drain-timeout", c.DrainTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("%s %s: must be positive", d.name, d.v)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	loop, err := isLoopbackAddr(c.Listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", c.Listen, err)
	}
	if !loop {
		var missing []string
		if c.TokenFile == "" {
			missing = append(missing, "--token-file")
		}
		if c.TLSCert == "" {
			missing = append(missing, "--tls-cert and --tls-key")
		}
		if len(missing) > 0 {
			return fmt.Errorf("--listen %s is not a loopback address: refusing to start without %s", c.Listen, strings.Join(missing, " and "))
		}
	}
	return nil
}

// isLoopbackAddr says whether host:port listens on loopback only: localhost or a loopback IP
// (an empty host, 0.0.0.0 or :: listen everywhere).
func isLoopbackAddr(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	return isLoopbackHost(host), nil
}

// isLoopbackHost says whether host names this machine's loopback: localhost (or a name under
// .localhost) or a loopback IP.
func isLoopbackHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}

// readToken reads a token file: its content less surrounding space, at least 16 bytes.
func readToken(flag, file string) ([]byte, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	t := []byte(strings.TrimSpace(string(b)))
	if len(t) < 16 {
		return nil, fmt.Errorf("%s %s: the token has %d bytes, want at least 16", flag, file, len(t))
	}
	return t, nil
}
