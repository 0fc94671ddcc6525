package service

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/report"
	"github.com/collplan/collplan/tables"
)

// set is what the service answers from: its topologies (read at load), its tuner clients and the
// caches of planners and priced classes built over them. A reload builds a new set and swaps it in
// whole; requests in flight finish on the set they started with, which closes its tuners after the
// last one.
type set struct {
	gen        uint64
	topologies map[string]topoFile
	tables     map[string]tableFile
	tuners     map[string]*plugin.Client
	planners   *lru[plannerKey, *built]
	classes    *lru[classKey, *class]
	metrics    *metrics

	refs   sync.WaitGroup
	closed sync.Once
}

// tableFile is a node table file (--table) read when the set was built: with the fitted overlay
// beside it (full) and alone (base).
type tableFile struct {
	file       string
	full, base *tables.Node
}

// topoFile is a topology file read when the set was built.
type topoFile struct {
	file string
	data []byte
}

// built is a topology spec's setup and planner (with its tuner).
type built struct {
	setup *report.Setup
	pl    *planner.Planner
}

type classKey struct {
	planner plannerKey
	cls     planner.Class
}

// class is a class priced once and answered by the tuner once (or by the built-in policy when
// the tuner failed): plans at any size are then an argmin over its menu.
type class struct {
	b      *built
	pr     *planner.Prepared
	policy string // the tuner's name, or "builtin" (no tuner, or it failed for this class)

	once sync.Once
	dt   *planner.DecisionTable
	err  error
}

// table is the class's decision table, compiled on first use.
func (c *class) table() (*planner.DecisionTable, error) {
	c.once.Do(func() { c.dt, c.err = c.pr.Compile() })
	return c.dt, c.err
}

// loadSet reads the topology files and opens the tuner plugins of cfg (nothing starts until a
// first call). Every error names the file or flag at fault.
func loadSet(cfg *Config, gen uint64, m *metrics, logTo io.Writer) (*set, error) {
	st := &set{gen: gen, topologies: map[string]topoFile{}, tables: map[string]tableFile{}, tuners: map[string]*plugin.Client{},
		planners: newLRU[plannerKey, *built](cfg.CachePlanners), classes: newLRU[classKey, *class](cfg.CacheClasses), metrics: m}
	for _, f := range cfg.Topologies {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--topology: %w", err)
		}
		if _, err := capabilities.DecodeTopology(f, data); err != nil {
			return nil, fmt.Errorf("--topology: %w", err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".toml")
		if _, dup := st.topologies[name]; dup {
			return nil, fmt.Errorf("--topology %s: a second topology named %q", f, name)
		}
		st.topologies[name] = topoFile{file: f, data: data}
	}
	for _, f := range cfg.Tables {
		full, err := tables.LoadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--table: %w", err)
		}
		base, err := tables.LoadFileBase(f)
		if err != nil {
			return nil, fmt.Errorf("--table: %w", err)
		}
		if isTable(full.Name) {
			return nil, fmt.Errorf("--table %s: %q is an embedded table's name; rename the file", f, full.Name)
		}
		if _, dup := st.tables[full.Name]; dup {
			return nil, fmt.Errorf("--table %s: a second table named %q", f, full.Name)
		}
		st.tables[full.Name] = tableFile{file: f, full: full, base: base}
	}
	for _, spec := range cfg.Tuners {
		if spec.None() {
			continue
		}
		spec, err := pinBinary(spec)
		if err != nil {
			st.close()
			return nil, err
		}
		c, err := plugin.Open(spec, logTo)
		if err != nil {
			st.close()
			return nil, err
		}
		if _, dup := st.tuners[c.Name()]; dup {
			_ = c.Close()
			st.close()
			return nil, fmt.Errorf("--tuner %s: a second tuner named %q", spec.Name, c.Name())
		}
		st.tuners[c.Name()] = c
	}
	return st, nil
}

// pinBinary pins spec's binary to its SHA-256 as the file is now, unless --tuner-sha256 pinned it
// already, and its configuration file to its SHA-256 as it is now: a set's plugin that crashes is
// restarted from the binary and the configuration the set was loaded with, or not at all (the
// built-in policy answers, saying which checksum changed), never from files replaced since then,
// which only the next reload starts. (Before the configuration was pinned, a crashing tuner
// restarted while the next generation's configuration was already in place answered with it,
// labelled as its own generation: TestHotSwapUnderLoad, under load.)
func pinBinary(spec plugin.Spec) (plugin.Spec, error) {
	if spec.Config != "" && spec.ConfigSHA256 == "" {
		sum, err := plugin.FileSHA256(spec.Config)
		if err != nil {
			return spec, fmt.Errorf("--tuner-config %s: %w", spec.Config, err)
		}
		spec.ConfigSHA256 = hex.EncodeToString(sum)
	}
	if spec.SHA256 != "" {
		return spec, nil
	}
	path, err := plugin.Resolve(spec.Name)
	if err != nil {
		return spec, fmt.Errorf("--tuner %s: %w", spec.Name, err)
	}
	sum, err := plugin.FileSHA256(path)
	if err != nil {
		return spec, fmt.Errorf("--tuner %s: %w", spec.Name, err)
	}
	spec.SHA256 = hex.EncodeToString(sum)
	return spec, nil
}

// starts is how many times the set's tuner plugins were started.
func (st *set) starts() int64 {
	var n int64
	for _, c := range st.tuners {
		n += c.Starts()
	}
	return n
}

// close ends the set's tuner plugins, once.
func (st *set) close() {
	st.closed.Do(func() {
		for _, c := range st.tuners {
			_ = c.Close()
		}
	})
}

// retire closes the set once no request holds it any more.
func (st *set) retire() {
	go func() {
		st.refs.Wait()
		st.close()
	}()
}

// planner returns the setup and planner of r's topology and tuner, from the cache or built now.
func (st *set) planner(ctx context.Context, r *resolved) (*built, plannerKey, error) {
	key := r.key()
	if b, ok := st.planners.get(key); ok {
		return b, key, nil
	}
	s, err := report.Build(r.spec, report.NoEnv)
	if err != nil {
		return nil, key, specError(err)
	}
	var tc *plugin.Client
	if r.tuner != "" {
		tc = st.tuners[r.tuner]
	}
	pl, err := s.Planner(ctx, tc)
	if err != nil {
		return nil, key, &apiError{status: 400, field: "", msg: err.Error()}
	}
	b := &built{setup: s, pl: pl}
	st.planners.add(key, b)
	return b, key, nil
}

// specError is a report.Build error as a 400 naming the query's field.
func specError(err error) *apiError {
	var fe *report.FieldError
	field := ""
	if errors.As(err, &fe) {
		field = strings.ReplaceAll(fe.Field, "-", "_")
	}
	return &apiError{status: 400, field: field, msg: err.Error()}
}

// class returns r's priced class, from the cache or priced now (one tuner call, bounded by the
// tuner's deadline; a tuner that fails makes the class the built-in policy's, labelled so).
func (st *set) class(ctx context.Context, r *resolved, lim *limiter) (*class, error) {
	b, key, err := st.planner(ctx, r)
	if err != nil {
		return nil, err
	}
	k := classKey{key, r.cls}
	if c, ok := st.classes.get(k); ok {
		st.metrics.cacheHits.Inc()
		return c, nil
	}
	st.metrics.cacheMisses.Inc()
	if lim != nil {
		if err := lim.acquire(ctx); err != nil {
			return nil, err
		}
		defer lim.release()
	}
	t0 := time.Now()
	pr, err := b.pl.Prepare(ctx, r.cls)
	if err != nil {
		return nil, &apiError{status: 400, msg: err.Error()}
	}
	c := &class{b: b, pr: pr, policy: report.BuiltinPolicy}
	st.metrics.prepareSeconds.Observe(time.Since(t0).Seconds())
	if name, _ := pr.Tuner(); name != "" {
		c.policy = name
		if pr.TunerErr() != nil {
			// Answered by the built-in policy, and not cached: a later request asks the tuner
			// again (the plugin client restarts it after a backoff). The planner goes too, in
			// case its tuner's Init is what failed.
			c.policy = report.BuiltinPolicy
			st.metrics.tunerFallbacks.Inc()
			st.planners.remove(key)
			return c, nil
		}
	}
	st.classes.add(k, c)
	return c, nil
}
