package main

import (
	"encoding/hex"
	"flag"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/collplan/collplan/plugin"
)

// tunerFlags choose the tuner plugin.
type tunerFlags struct {
	name, config, sha256 string
	timeout              time.Duration
}

func (f *tunerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.name, "tuner", "none", "tuner plugin: none, a NAME (tuner-NAME beside this binary, then on PATH) or a PATH")
	fs.StringVar(&f.config, "tuner-config", "", "configuration file handed to the tuner plugin")
	fs.DurationVar(&f.timeout, "tuner-timeout", 0, "tuner start and per-call deadline (default 5s to start, 2s per call)")
	fs.StringVar(&f.sha256, "tuner-sha256", "", "pin the tuner binary to this SHA-256 (hex)")
}

// client resolves the plugin and returns its client (nil for none). Nothing starts yet. Log lines
// go to logTo.
func (f *tunerFlags) client(logTo io.Writer) (*plugin.Client, error) {
	path, err := plugin.Resolve(f.name)
	if err != nil {
		return nil, usageError{err}
	}
	if path == "" {
		if f.config != "" || f.timeout != 0 || f.sha256 != "" {
			return nil, usagef("--tuner-config, --tuner-timeout and --tuner-sha256 need --tuner")
		}
		return nil, nil
	}
	if f.timeout < 0 {
		return nil, usagef("--tuner-timeout %s: must be positive", f.timeout)
	}
	cfg := plugin.Config{Path: path, ConfigPath: f.config, StartTimeout: f.timeout, CallTimeout: f.timeout}
	if f.sha256 != "" {
		if cfg.SHA256, err = hex.DecodeString(strings.TrimSpace(f.sha256)); err != nil || len(cfg.SHA256) != 32 {
			return nil, usagef("--tuner-sha256 %q: want 64 hex digits", f.sha256)
		}
	}
	if f.config != "" {
		if _, err := os.Stat(f.config); err != nil {
			return nil, usageError{err}
		}
	}
	if cfg.Logger, err = plugin.EnvLogger(logTo); err != nil {
		return nil, usageError{err}
	}
	c, err := plugin.New(cfg)
	if err != nil {
		return nil, usageError{err}
	}
	openTuners.add(c)
	return c, nil
}

// openTuners are the clients this process started. A plugin whose host exits without closing it
// exits by itself (plugin.Serve watches its parent); tests close them.
var openTuners tunerSet

type tunerSet struct {
	mu sync.Mutex
	cs []*plugin.Client
}

func (s *tunerSet) add(c *plugin.Client) {
	s.mu.Lock()
	s.cs = append(s.cs, c)
	s.mu.Unlock()
}

// closeAll ends every plugin started so far.
func (s *tunerSet) closeAll() {
	s.mu.Lock()
	cs := s.cs
	s.cs = nil
	s.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}
