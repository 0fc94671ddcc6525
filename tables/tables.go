package tables

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/collplan/collplan/internal/configfile"
)

// The node tables shipped in the binary: NAME.toml, optionally with a fitted overlay NAME.fit.toml
// that calibrate writes beside it.
//
//go:embed *.toml
var embedded embed.FS

const (
	tableSuffix   = ".toml"
	overlaySuffix = ".fit.toml"
)

// MaxDepth is how deeply a node table or overlay nests (as configfile.CheckTOML counts): the
// deepest paths of the schema, corrections.cell[i].factors[j] and constants.hw_latencies.LINK.ALGO[j],
// are 5 levels. Every map of the schema has fixed-depth values, so there is no slack.
const MaxDepth = 5

// KeyError is a problem with one key of one table file: an unknown key or a value out of range.
type KeyError struct {
	File string // the file as named to Decode, LoadFile or ApplyOverlay
	Line int    // 1-based line of the key (or of its table header); 0 when unknown
	Key  string // dotted path, e.g. "scale.1.graphs.ring.n_channels" or "corrections.cell[0].algo"
	Msg  string
}

func (e *KeyError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("tables: %s: line %d: %s: %s", e.File, e.Line, e.Key, e.Msg)
	}
	return fmt.Sprintf("tables: %s: %s: %s", e.File, e.Key, e.Msg)
}

// Names lists the embedded base tables (not the .fit overlays), sorted.
func Names() []string {
	entries, err := fs.ReadDir(embedded, ".")
	if err != nil { // cannot happen for an embed.FS root
		return nil
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, tableSuffix) || strings.HasSuffix(n, overlaySuffix) {
			continue
		}
		names = append(names, strings.TrimSuffix(n, tableSuffix))
	}
	sort.Strings(names)
	return names
}

// OverlaySchema is the schema_version of the overlays this build reads and calibrate writes. An
// overlay states it in a top-level key, schema_version = 1, and ApplyOverlay refuses any other
// (or none). Version 1 is the schema of Node: the keys of a node table, every one optional.
const OverlaySchema = 1

// Load decodes the embedded table NAME.toml and, when the embedded NAME.fit.toml exists, applies it
// on top (ApplyOverlay).
func Load(name string) (*Node, error) {
	n, err := LoadBase(name)
	if err != nil {
		return nil, err
	}
	ofile := strings.TrimSuffix(name, tableSuffix) + overlaySuffix
	odata, err := embedded.ReadFile(ofile)
	if err != nil {
		return n, nil // no overlay
	}
	return ApplyOverlay(n, ofile, odata)
}

// LoadBase decodes the embedded table NAME.toml alone, without its fitted overlay.
func LoadBase(name string) (*Node, error) {
	name = strings.TrimSuffix(name, tableSuffix)
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasSuffix(name, ".fit") {
		return nil, fmt.Errorf("tables: bad table name %q", name)
	}
	file := name + tableSuffix
	data, err := embedded.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tables: no embedded table %q (have %s)", name, strings.Join(Names(), ", "))
	}
	return Decode(file, data)
}

// LoadFile decodes a table from disk. When a sibling BASENAME.fit.toml exists on disk beside it, that
// overlay is applied on top. A file over configfile.MaxBytes (4 MiB) is an error naming it.
func LoadFile(p string) (*Node, error) {
	n, err := LoadFileBase(p)
	if err != nil {
		return nil, err
	}
	op := OverlayPath(p)
	odata, err := configfile.Read(op)
	if errors.Is(err, fs.ErrNotExist) {
		return n, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	return ApplyOverlay(n, op, odata)
}

// LoadFileBase decodes a table from disk alone, without the overlay beside it. A file over
// configfile.MaxBytes (4 MiB) is an error naming it.
func LoadFileBase(p string) (*Node, error) {
	if IsOverlayPath(p) {
		return nil, fmt.Errorf("tables: %s is a fitted overlay; load its base table instead", p)
	}
	data, err := configfile.Read(p)
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	return Decode(p, data)
}

// OverlayPath is where the fitted overlay of the table file p lies, which LoadFile applies: beside
// it, BASENAME.fit.toml.
func OverlayPath(p string) string { return strings.TrimSuffix(p, tableSuffix) + overlaySuffix }

// IsOverlayPath reports whether p names a fitted overlay (NAME.fit.toml) rather than a node table.
func IsOverlayPath(p string) bool { return strings.HasSuffix(p, overlaySuffix) }

// Decode strictly decodes one table (no overlay). Every key outside the schema, every type mismatch
// and every value out of range is an error naming the file and the key (and the line when known).
// Node.Name is the file's base name without ".toml"; Node.Sources holds the source tags. Text over
// configfile.MaxBytes (4 MiB) or nested deeper than MaxDepth is refused before it is decoded (the
// nesting error names the line); so is such an overlay in ApplyOverlay.
func Decode(file string, data []byte) (*Node, error) {
	n, sc, err := decodeStrict(file, data)
	if err != nil {
		return nil, err
	}
	n.Name = tableName(file)
	n.File = file
	n.Sources = sc.sources
	if err := problemsError(file, sc, validate(n)); err != nil { // after Sources: validateFit reads them
		return nil, err
	}
	return n, nil
}

// ApplyOverlay deep-merges the overlay's TOML onto base (tables merge key by key, arrays and arrays of
// tables replace) and decodes the result strictly. The overlay's schema_version is checked first
// (OverlayVersion: it must be OverlaySchema); then the overlay alone is checked strictly, so
// unknown keys and mistyped values in it are errors naming the overlay file. Source tags of the keys
// the overlay sets replace the base's. base is not modified.
func ApplyOverlay(base *Node, file string, data []byte) (*Node, error) {
	if base == nil {
		return nil, fmt.Errorf("tables: %s: overlay applied to a nil table", file)
	}
	// 1. The overlay on its own: syntax, its version, types, unknown keys.
	over, err := overlayTree(file, data)
	if err != nil {
		return nil, err
	}
	delete(over, versionKey)
	_, osc, err := decodeStrict(file, data, versionKey)
	if err != nil {
		return nil, err
	}
	// 2. The base as a generic tree (re-encoded from the decoded struct, so any Node works).
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(base); err != nil {
		return nil, fmt.Errorf("tables: %s: encoding base %s: %w", file, base.File, err)
	}
	var tree map[string]any
	if _, err := toml.Decode(buf.String(), &tree); err != nil {
		return nil, fmt.Errorf("tables: %s: re-reading base %s: %w", file, base.File, err)
	}
	merge(tree, over)
	// 3. The merge, decoded strictly and validated; problems are the overlay's doing.
	buf.Reset()
	if err := toml.NewEncoder(&buf).Encode(tree); err != nil {
		return nil, fmt.Errorf("tables: %s: encoding merge: %w", file, err)
	}
	var n Node
	md, err := toml.Decode(buf.String(), &n)
	if err != nil {
		return nil, fmt.Errorf("tables: %s (merged onto %s): %w", file, base.File, err)
	}
	if ks := md.Undecoded(); len(ks) > 0 { // cannot happen: both halves were checked
		return nil, fmt.Errorf("tables: %s (merged onto %s): unknown key %q", file, base.File, ks[0].String())
	}
	n.Name = base.Name
	n.File = base.File
	n.Overlay = file
	n.Sources = make(map[string]string, len(base.Sources)+len(osc.sources))
	for k, v := range base.Sources {
		n.Sources[k] = v
	}
	for _, p := range append(append([]string(nil), osc.keys...), osc.arrays...) {
		for k := range n.Sources {
			if k == p || strings.HasPrefix(k, p+".") || strings.HasPrefix(k, p+"[") {
				delete(n.Sources, k)
			}
		}
	}
	for k, v := range osc.sources {
		n.Sources[k] = v
	}
	if err := problemsError(file, osc, validate(&n)); err != nil { // after Sources: validateFit reads them
		return nil, err
	}
	return &n, nil
}

// Estimated returns, sorted, the dotted paths whose source tag is "estimate".
func (n *Node) Estimated() []string {
	var out []string
	for k, v := range n.Sources {
		if v == "estimate" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// ScaleFor picks the [scale.N] entry for a communicator spanning nNodes nodes, as NCCL's index2 does
// (nNodes<=2 ? nNodes-1 : 2): "1" for one node, "2" for two, "4" for three or more.
func (n *Node) ScaleFor(nNodes int) (string, Scale, error) {
	var key string
	switch {
	case nNodes < 1:
		return "", Scale{}, fmt.Errorf("tables: %s: node count %d < 1", n.Name, nNodes)
	case nNodes == 1:
		key = "1"
	case nNodes == 2:
		key = "2"
	default:
		key = "4"
	}
	s, ok := n.Scale[key]
	if !ok {
		return key, Scale{}, fmt.Errorf("tables: %s: no [scale.%s] for %d nodes", n.Name, key, nNodes)
	}
	return key, s, nil
}

// versionKey is an overlay's top-level key for its schema version.
const versionKey = "schema_version"

// ErrNoSchemaVersion is the error (wrapped, naming the file) of an overlay without schema_version:
// one written before overlays had versions, whose keys are version 1's. ApplyOverlay refuses it;
// calibrate, rewriting such a file at --out, migrates it.
var ErrNoSchemaVersion = errors.New("schema_version is missing")

// OverlayVersion reads an overlay's schema_version and checks it: the key must be at the top of the
// file (before any [table]) and its value OverlaySchema. Errors name the file (and the line).
func OverlayVersion(file string, data []byte) (int, error) {
	if _, err := overlayTree(file, data); err != nil {
		return 0, err
	}
	return OverlaySchema, nil
}

// overlayTree decodes an overlay as a generic tree (syntax, size and depth checked) after checking
// its schema_version (OverlayVersion).
func overlayTree(file string, data []byte) (map[string]any, error) {
	var over map[string]any
	if _, err := configfile.DecodeTOML(file, data, MaxDepth, &over); err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	v, ok := over[versionKey]
	if !ok {
		return nil, fmt.Errorf("tables: %s: %w: an overlay starts with %s = %d (one written before overlays had versions has the same keys: add that line, or refit it)",
			file, ErrNoSchemaVersion, versionKey, OverlaySchema)
	}
	at := func(msg string, args ...any) error {
		return &KeyError{File: file, Line: scanSource(data).flat[versionKey], Key: versionKey, Msg: fmt.Sprintf(msg, args...)}
	}
	switch x := v.(type) {
	case int64:
		if x != OverlaySchema {
			return nil, at("%d is not a version this build reads (it reads %d)", x, OverlaySchema)
		}
	case string:
		return nil, at("want an integer, got %q", x)
	default:
		return nil, at("want an integer, got %v", x)
	}
	return over, nil
}

// decodeStrict decodes data into a Node and rejects keys outside the schema, but for the top-level
// keys named in allow (an overlay's schema_version). It does not validate values (an overlay is
// partial).
func decodeStrict(file string, data []byte, allow ...string) (*Node, *scan, error) {
	var n Node
	md, err := configfile.DecodeTOML(file, data, MaxDepth, &n)
	if err != nil {
		return nil, nil, fmt.Errorf("tables: %w", err)
	}
	sc := scanSource(data)
	undecoded := slices.DeleteFunc(md.Undecoded(), func(k toml.Key) bool { return len(k) == 1 && slices.Contains(allow, k[0]) })
	if len(undecoded) == 0 {
		return &n, sc, nil
	}
	seen := make(map[string]bool, len(undecoded))
	var errs []error
	for _, k := range undecoded {
		key := k.String()
		seen[key] = true
		parent := false // report a table once, not each of its keys
		for i := 1; i < len(k); i++ {
			if seen[toml.Key(k[:i]).String()] {
				parent = true
				break
			}
		}
		if parent {
			continue
		}
		errs = append(errs, &KeyError{File: file, Line: sc.flat[strings.Join(k, ".")], Key: key, Msg: "unknown key"})
	}
	return nil, nil, errors.Join(errs...)
}

func tableName(file string) string {
	return strings.TrimSuffix(filepath.Base(file), tableSuffix)
}

// merge copies over into dst: tables merge key by key, anything else (values, arrays, arrays of
// tables) replaces.
func merge(dst, over map[string]any) {
	for k, ov := range over {
		if om, ok := ov.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, om)
				continue
			}
		}
		dst[k] = ov
	}
}

// problem is one validation failure: the dotted key and what is wrong with it.
type problem struct {
	key, msg string
}

func problemsError(file string, sc *scan, ps []problem) error {
	if len(ps) == 0 {
		return nil
	}
	errs := make([]error, 0, len(ps))
	for _, p := range ps {
		errs = append(errs, &KeyError{File: file, Line: sc.lineOf(p.key), Key: p.key, Msg: p.msg})
	}
	return errors.Join(errs...)
}
