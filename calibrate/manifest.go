package calibrate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/internal/configfile"
)

// ManifestName is the manifest LoadSweeps looks for in a directory.
const ManifestName = "sweeps.toml"

// Manifest is a sweeps.toml: one [[sweep]] table per measured file.
//
//	[[sweep]]
//	file = "ar-ring-ll128.txt"   # required; relative to the manifest's directory
//	algo = "Ring"                # NCCL_ALGO the sweep ran with; absent: see the file, else free
//	proto = "LL128"              # NCCL_PROTO, likewise
//	coll = "allreduce"           # when the file does not name its collective
//	nodes = 2
//	gpus_per_node = 8            # ranks per node (ranks_per_node is the same key); absent: the rank lines
//	nccl_version = "2.30.7"
//	note = "EFA, NCCL_NET_GDR_LEVEL=PHB"
//
// Decoding is strict: unknown keys and tables, wrongly typed values, invalid NCCL_ALGO/NCCL_PROTO
// values, unknown collectives, non-positive counts and a file listed twice are errors naming the
// manifest's file and line.
type Manifest struct {
	File   string // the manifest's path, as given
	Sweeps []ManifestEntry
}

// ManifestEntry is one [[sweep]] table.
type ManifestEntry struct {
	Line        int    // line of the entry's [[sweep]] header
	File        string // as written
	Algo, Proto string // NCCL_ALGO/NCCL_PROTO syntax; "" when absent
	Coll        string // as written; "" when absent
	Nodes       int    // 0 when absent
	GPUsPerNode int    // gpus_per_node, or ranks_per_node, its synonym; 0 when absent
	NCCLVersion string
	Note        string
}

var manifestKeys = []string{"file", "algo", "proto", "coll", "nodes", "gpus_per_node", "ranks_per_node", "nccl_version", "note"}

// manifestMaxDepth is how deeply a manifest may nest (as configfile.CheckTOML counts): the schema's
// paths are sweep[i].key, 3 levels, and one level of slack because the text is decoded into a
// free-form map and its shape checked here, so that one level too deep (note = ["x"]) gets the
// error naming the key.
const manifestMaxDepth = 3 + 1

// LoadManifest reads and decodes the manifest at path (see DecodeManifest). A file over
// configfile.MaxBytes (4 MiB) is an error.
func LoadManifest(path string) (*Manifest, error) {
	data, err := configfile.Read(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("calibrate: %s: %w", path, pe.Err)
		}
		return nil, fmt.Errorf("calibrate: %w", err) // names path
	}
	return DecodeManifest(path, data)
}

// DecodeManifest decodes a sweeps.toml; file names it in errors. A syntax error, and nesting more
// than one level deeper than the schema, is a Problem; the other errors are a Problems list with
// one entry per offending key. Text over configfile.MaxBytes (4 MiB) is a plain error.
func DecodeManifest(file string, data []byte) (*Manifest, error) {
	if err := configfile.CheckTOML(file, data, manifestMaxDepth); err != nil {
		var de *configfile.DepthError
		if errors.As(err, &de) {
			return nil, Problem{File: file, Line: de.Line,
				Msg: fmt.Sprintf("nesting depth %d exceeds the maximum of %d", de.Depth, de.Max)}
		}
		return nil, fmt.Errorf("calibrate: %w", err) // names file
	}
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil { // CheckTOML has accepted data
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, Problem{File: file, Line: max(pe.Position.Line, 1), Msg: "TOML: " + pe.Message}
		}
		return nil, Problem{File: file, Line: 1, Msg: "TOML: " + err.Error()}
	}
	text := string(data)
	heads := sweepHeaderLines(text)
	var probs Problems
	add := func(line int, format string, args ...any) {
		probs = append(probs, Problem{File: file, Line: max(line, 1), Msg: fmt.Sprintf(format, args...)})
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != "sweep" {
			add(keyLine(text, -1, k, heads), "unknown key %q (want [[sweep]] tables)", k)
		}
	}
	m := &Manifest{File: file}
	v, ok := raw["sweep"]
	if !ok {
		if len(probs) == 0 {
			add(1, "no [[sweep]] table")
		}
		return nil, probs
	}
	list, ok := tableList(v)
	if !ok {
		add(keyLine(text, -1, "sweep", heads), "sweep must be an array of tables ([[sweep]])")
		return nil, probs
	}
	seen := map[string]int{}
	for i, t := range list {
		e := ManifestEntry{Line: 1}
		if i < len(heads) {
			e.Line = heads[i]
		}
		line := func(key string) int { return keyLine(text, i, key, heads) }
		tkeys := make([]string, 0, len(t))
		for k := range t {
			tkeys = append(tkeys, k)
		}
		sort.Strings(tkeys)
		for _, k := range tkeys {
			if !slices.Contains(manifestKeys, k) {
				add(line(k), "unknown key %q in [[sweep]] (want %s)", k, strings.Join(manifestKeys, ", "))
			}
		}
		str := func(key string, dst *string) {
			if x, ok := t[key]; ok {
				s, ok := x.(string)
				if !ok {
					add(line(key), "%s must be a string, got %s", key, describeTOML(x))
					return
				}
				*dst = s
			}
		}
		count := func(key string, dst *int) {
			if x, ok := t[key]; ok {
				n, ok := x.(int64)
				if !ok {
					add(line(key), "%s must be an integer, got %s", key, describeTOML(x))
					return
				}
				if n < 1 || n > 1<<20 {
					add(line(key), "%s must be a positive count, got %d", key, n)
					return
				}
				*dst = int(n)
			}
		}
		str("file", &e.File)
		str("algo", &e.Algo)
		str("proto", &e.Proto)
		str("coll", &e.Coll)
		str("nccl_version", &e.NCCLVersion)
		str("note", &e.Note)
		count("nodes", &e.Nodes)
		count("gpus_per_node", &e.GPUsPerNode)
		var rpn int
		count("ranks_per_node", &rpn)
		if rpn != 0 && e.GPUsPerNode != 0 && rpn != e.GPUsPerNode {
			add(line("ranks_per_node"), "ranks_per_node = %d, but gpus_per_node = %d (the same key: give one)", rpn, e.GPUsPerNode)
		} else if rpn != 0 {
			e.GPUsPerNode = rpn
		}
		if _, ok := t["file"]; !ok {
			add(e.Line, "[[sweep]] without file")
		} else if strings.TrimSpace(e.File) == "" {
			add(line("file"), "file is empty")
		} else if prev, dup := seen[filepath.Clean(e.File)]; dup {
			add(line("file"), "file %q is listed twice (first on line %d)", e.File, prev)
		} else {
			seen[filepath.Clean(e.File)] = line("file")
		}
		if e.Algo != "" {
			if _, err := capabilities.ParseAlgoEnv(e.Algo); err != nil {
				add(line("algo"), "algo: %v", err)
			}
		}
		if e.Proto != "" {
			if _, err := capabilities.ParseProtoEnv(e.Proto); err != nil {
				add(line("proto"), "proto: %v", err)
			}
		}
		if e.Coll != "" {
			if _, err := capabilities.ParseColl(e.Coll); err != nil {
				add(line("coll"), "coll: %v", err)
			}
		}
		if e.NCCLVersion != "" && !versionRE3.MatchString(e.NCCLVersion) {
			add(line("nccl_version"), "nccl_version %q is not a version like 2.30.7", e.NCCLVersion)
		}
		m.Sweeps = append(m.Sweeps, e)
	}
	if len(probs) > 0 {
		return nil, probs
	}
	return m, nil
}

// tableList accepts [[sweep]] tables and an inline array of tables.
func tableList(v any) ([]map[string]any, bool) {
	switch x := v.(type) {
	case []map[string]any:
		return x, true
	case []any:
		out := make([]map[string]any, 0, len(x))
		for _, e := range x {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, false
			}
			out = append(out, m)
		}
		return out, true
	}
	return nil, false
}

var versionRE3 = regexp.MustCompile(`^\d+\.\d+(\.\d+)?$`)

func describeTOML(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("%T", v)
}

// sweepHeaderLines returns the line of each "[[sweep]]" header, in order.
func sweepHeaderLines(text string) []int {
	var out []int
	for i, l := range strings.Split(text, "\n") {
		if isSweepHeader(l) {
			out = append(out, i+1)
		}
	}
	return out
}

var sweepHeaderRE = regexp.MustCompile(`^\s*\[\[\s*"?sweep"?\s*\]\]\s*(#.*)?$`)

func isSweepHeader(l string) bool { return sweepHeaderRE.MatchString(strings.TrimRight(l, "\r")) }

// keyLine finds the line of key in the i-th [[sweep]] table (i = -1: before the first table, or a
// table header named key). TOML does not report key positions, so this scans the text; it falls
// back to the table's header line, then to line 1.
func keyLine(text string, i int, key string, heads []int) int {
	lines := strings.Split(text, "\n")
	from, to := 0, len(lines)
	if i >= 0 && i < len(heads) {
		from = heads[i]
		if i+1 < len(heads) {
			to = heads[i+1] - 1
		}
	} else if i < 0 && len(heads) > 0 {
		to = heads[0] - 1
	}
	keyRE := regexp.MustCompile(`^\s*(` + regexp.QuoteMeta(key) + `|"` + regexp.QuoteMeta(key) + `"|'` + regexp.QuoteMeta(key) + `')\s*(=|\.)`)
	tableRE := regexp.MustCompile(`^\s*\[\[?\s*"?` + regexp.QuoteMeta(key) + `"?\s*[\].]`)
	for n := from; n < to && n < len(lines); n++ {
		if keyRE.MatchString(lines[n]) || (i < 0 && tableRE.MatchString(lines[n])) {
			return n + 1
		}
	}
	if i < 0 {
		for n, l := range lines {
			if tableRE.MatchString(l) {
				return n + 1
			}
		}
	}
	if i >= 0 && i < len(heads) {
		return heads[i]
	}
	return 1
}

// LoadSweeps reads sweeps from a directory or a manifest and applies their pins.
//
// A directory: every *.txt, *.log and *.out file in it (not in subdirectories), in name order; when
// it also holds a sweeps.toml, its entries apply to the files they name, and files it names with
// other extensions are read too. A manifest: exactly the files it lists.
//
// Pins come first from the manifest (per field: algo, proto), then from NCCL_ALGO/NCCL_PROTO lines
// in the file, else free. The manifest's coll, nodes, gpus_per_node and nccl_version fill what the
// file does not say; where both say and disagree, the file is kept and the disagreement is a
// problem.
//
// A file: a *.toml is a manifest; any other file is one sweep file, read alone.
//
// The problems list every file that was rejected as a whole (unreadable, no table) and, for
// convenience, every sweep's Bad and Warnings. The error is for the argument itself (a path that
// does not exist, a manifest that does not decode) and for a manifest entry whose file cannot be
// read (missing, a directory): the manifest says how to read that file, so nothing is fitted
// without it.
func LoadSweeps(dirOrManifest string) ([]*Sweep, []Problem, error) {
	ld, err := loadSweeps(dirOrManifest)
	if err != nil {
		return nil, nil, err
	}
	return ld.sweeps, ld.probs, nil
}

// loaded is what loadSweeps read: every file it tried, in order, its sweeps, the files rejected
// as a whole (by path), and every problem.
type loaded struct {
	files   []string
	sweeps  []*Sweep
	dropped map[string]Problem
	probs   []Problem
}

func loadSweeps(dirOrManifest string) (*loaded, error) {
	info, err := os.Stat(dirOrManifest)
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	var (
		man   *Manifest
		files []string
		base  string
	)
	if info.IsDir() {
		base = dirOrManifest
		entries, err := os.ReadDir(dirOrManifest)
		if err != nil {
			return nil, fmt.Errorf("calibrate: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".txt", ".log", ".out":
				files = append(files, filepath.Join(dirOrManifest, e.Name()))
			}
		}
		mpath := filepath.Join(dirOrManifest, ManifestName)
		if _, err := os.Stat(mpath); err == nil {
			if man, err = LoadManifest(mpath); err != nil {
				return nil, err
			}
		}
	} else if strings.EqualFold(filepath.Ext(dirOrManifest), ".toml") {
		base = filepath.Dir(dirOrManifest)
		if man, err = LoadManifest(dirOrManifest); err != nil {
			return nil, err
		}
	} else {
		files = []string{dirOrManifest} // one sweep file
	}
	entries := map[string]*ManifestEntry{}
	if man != nil {
		for i := range man.Sweeps {
			e := &man.Sweeps[i]
			p := e.File
			if !filepath.IsAbs(p) {
				p = filepath.Join(base, p)
			}
			p = filepath.Clean(p)
			entries[p] = e
			if !slices.Contains(files, p) {
				files = append(files, p)
			}
		}
	}
	sort.Strings(files)

	ld := &loaded{files: files, dropped: map[string]Problem{}}
	for _, path := range files {
		e := entries[filepath.Clean(path)]
		f, err := openSweep(path)
		if err != nil {
			if e != nil {
				// The manifest says how to read this file: without it, its sweeps (or the directory's
				// other files) would be fitted as something else.
				return nil, Problem{File: man.File, Line: e.Line, Msg: fmt.Sprintf("file %q: %v", e.File, unwrapPathErr(err))}
			}
			p := Problem{File: path, Line: 1, Msg: unwrapPathErr(err).Error()}
			ld.dropped[path], ld.probs = p, append(ld.probs, p)
			continue
		}
		sweeps, err := ParseSweeps(path, f)
		f.Close()
		if err != nil {
			var p Problem
			if !errors.As(err, &p) {
				p = Problem{File: path, Line: 1, Msg: err.Error()}
			}
			ld.dropped[path], ld.probs = p, append(ld.probs, p)
			continue
		}
		for _, s := range sweeps {
			if e != nil {
				applyEntry(s, man.File, e)
			}
			ld.sweeps = append(ld.sweeps, s)
			ld.probs = append(ld.probs, s.Bad...)
			ld.probs = append(ld.probs, s.Warnings...)
		}
	}
	return ld, nil
}

// openSweep opens a sweep file; a directory is an error (fs.ErrInvalid, "is a directory").
func openSweep(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: errIsDir}
	}
	return f, nil
}

var errIsDir = errors.New("is a directory")

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// applyEntry applies a manifest entry to a sweep read from its file: pins first, then the facts
// the file lacks. Disagreements become warnings on the sweep, naming the manifest line.
func applyEntry(s *Sweep, manFile string, e *ManifestEntry) {
	warn := func(format string, args ...any) {
		s.Warnings = append(s.Warnings, Problem{File: manFile, Line: e.Line,
			Msg: fmt.Sprintf("%s: ", e.File) + fmt.Sprintf(format, args...)})
	}
	if e.Algo != "" {
		if s.Pin.AlgoSource == pinSourceFile && !strings.EqualFold(s.Pin.Algo, e.Algo) {
			warn("manifest algo %q overrides NCCL_ALGO=%s in the file", e.Algo, s.Pin.Algo)
		}
		s.Pin.Algo, s.Pin.AlgoSource = e.Algo, pinSourceManif
	}
	if e.Proto != "" {
		if s.Pin.ProtoSource == pinSourceFile && !strings.EqualFold(s.Pin.Proto, e.Proto) {
			warn("manifest proto %q overrides NCCL_PROTO=%s in the file", e.Proto, s.Pin.Proto)
		}
		s.Pin.Proto, s.Pin.ProtoSource = e.Proto, pinSourceManif
	}
	s.Pin.fixSource()
	if e.Coll != "" {
		c, _ := capabilities.ParseColl(e.Coll) // DecodeManifest checked it
		switch {
		case s.CollSource == CollInferred && s.Coll != c:
			warn("coll %q, but the file's columns say %s; the manifest's is kept", e.Coll, s.Coll)
			fallthrough
		case (!s.CollKnown && s.Program == "") || s.CollSource == CollInferred:
			s.Coll, s.CollKnown, s.CollSource = c, true, CollFromManifest
			s.Warnings = slices.DeleteFunc(s.Warnings, func(p Problem) bool { return strings.HasPrefix(p.Msg, msgNoColl) })
		case !s.CollKnown:
			warn("coll %q, but the file runs %s", e.Coll, s.Program)
		case s.Coll != c:
			warn("coll %q, but the file runs %s", e.Coll, s.Coll)
		}
	}
	fill := func(name string, dst *int, v int) {
		switch {
		case v == 0:
		case *dst == 0:
			*dst = v
		case *dst != v:
			warn("%s = %d, but the file's rank lines give %d", name, v, *dst)
		}
	}
	fill("nodes", &s.Nodes, e.Nodes)
	fill("gpus_per_node", &s.GPUsPerNode, e.GPUsPerNode)
	if s.ShapeSource == "" && s.GPUsPerNode != 0 {
		s.ShapeSource = ShapeFromManifest
	}
	if e.NCCLVersion != "" {
		switch {
		case s.NCCLVersion == "":
			s.NCCLVersion = e.NCCLVersion
		case s.NCCLVersion != e.NCCLVersion:
			warn("nccl_version %s, but the file says %s", e.NCCLVersion, s.NCCLVersion)
		}
	}
}
