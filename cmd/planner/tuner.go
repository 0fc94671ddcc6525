package main

import (
	"context"
	"flag"
	"io"
	"os"
	"sync"

	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin"
)

// tunerFlags choose the tuner plugin.
type tunerFlags struct{ plugin.Spec }

func (f *tunerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Name, "tuner", "none", "tuner plugin: none, a NAME (tuner-NAME beside this binary, then on PATH) or a PATH")
	fs.StringVar(&f.Config, "tuner-config", "", "configuration file handed to the tuner plugin")
	fs.DurationVar(&f.Timeout, "tuner-timeout", 0, "tuner start and per-call deadline (default 5s to start, 2s per call)")
	fs.StringVar(&f.SHA256, "tuner-sha256", "", "pin the tuner binary to this SHA-256 (hex)")
}

// client resolves the plugin and returns its client (nil for none). Nothing starts yet. Log lines
// go to logTo.
//
// The planner's commands do not fall back (a failing tuner is an error: see prepare), so the
// client's own "using the built-in policy" warnings would be wrong here: it logs only when
// COLLPLAN_TUNER_LOG asks for it.
func (f *tunerFlags) client(logTo io.Writer) (*plugin.Client, error) {
	if os.Getenv(plugin.EnvLogVar) == "" {
		logTo = io.Discard
	}
	c, err := plugin.Open(f.Spec, logTo)
	if err != nil {
		return nil, usageError{err}
	}
	if c != nil {
		openTuners.add(c)
	}
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

// prepare asks the planner (and its tuner) for a class. These commands answer offline questions,
// so a tuner that fails (does not start, is misconfigured, crashes, hangs, answers garbage) is an
// error, exit status 2, never an answer from the built-in policy passed off as the tuner's.
func prepare(ctx context.Context, pl *planner.Planner, cls planner.Class) (*planner.Prepared, error) {
	pr, err := pl.Prepare(ctx, cls)
	if err != nil {
		return nil, usageError{err}
	}
	if err := pr.TunerErr(); err != nil {
		name, _ := pr.Tuner()
		return nil, usagef("tuner %s failed: %v", name, err)
	}
	return pr, nil
}
