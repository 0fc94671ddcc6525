package capabilities

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/collplan/collplan/internal/configfile"
)

// Defaults of the topology file's (and a node table's) optional keys.
const (
	defaultCUDARTVersion  = 12080 // cudart_version: CUDA 12.8
	defaultMaxTreePattern = PatternBalancedTree
)

// The topology file's top-level keys, by type. Required keys must be present.
var (
	topoIntKeys = []string{"n_nodes", "n_ranks", "min_comp_cap", "max_comp_cap", "nvs_count",
		"collnet_heads_num", "collnet_direct_n_heads", "max_tree_pattern", "comm_n_channels",
		"nvls_channels", "max_local_ranks", "local_ranks", "cudart_version"}
	topoStringKeys = []string{"cpu_arch", "cpu_vendor", "net_device_type"}
	topoBoolKeys   = []string{"collnet_enable", "collnet_chain_support", "collnet_plugin_iallgather",
		"collnet_plugin_ireducescatter", "nvls_support"}
	topoOtherKeys    = []string{"collnet_support", "env", "graphs"}
	topoRequiredKeys = []string{"n_nodes", "n_ranks", "min_comp_cap", "max_comp_cap", "cpu_arch",
		"cpu_vendor", "comm_n_channels", "max_local_ranks"}

	// topoGraphNames are the [graphs.NAME] tables, in Graphs field order.
	topoGraphNames = []string{"tree", "ring", "collnet_direct", "collnet_chain", "nvls"}
	topoGraphKeys  = []string{"n_channels", "bw_intra", "bw_inter", "latency_inter", "type_intra",
		"type_inter", "same_channels"}
)

// topoMaxDepth is how deeply a topology file may nest (as configfile.CheckTOML counts): the deepest
// paths of the schema are graphs.NAME.key, 3 levels (collnet_support[i] and env.NAME are 2), and
// one level of slack because the text is decoded into a free-form map and its shape checked here,
// so that one level too deep ([[graphs.ring]], n_channels = [2]) gets the error naming the key.
const topoMaxDepth = 3 + 1

// LoadTopology reads and decodes the topology file at path (see DecodeTopology). A file over
// configfile.MaxBytes (4 MiB) is an error.
func LoadTopology(path string) (Topology, error) {
	data, err := configfile.Read(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return Topology{}, fmt.Errorf("capabilities: %s: %w", path, pe.Err)
		}
		return Topology{}, fmt.Errorf("capabilities: %w", err) // names path
	}
	return DecodeTopology(path, data)
}

// DecodeTopology decodes a topology file (the schema of design/topology-example.toml) strictly and
// validates the result. file names the input in errors, each of which starts with
// "capabilities: FILE: ".
//
// Text over configfile.MaxBytes (4 MiB) or nested more than one level deeper than the schema
// (3 levels, graphs.NAME.key) is refused before it is decoded; the nesting error names the line.
//
// Strictness: unknown keys, wrongly typed values (an integer key given as 1.0 or "1"; a float key may
// be written as an integer literal), unknown enumeration words and malformed collnet_support entries
// are errors that name the key; syntax errors name the line. Required keys: n_nodes, n_ranks,
// min_comp_cap, max_comp_cap, cpu_arch, cpu_vendor, comm_n_channels, max_local_ranks. Defaults of
// the others: false, 0, max_tree_pattern 1, net_device_type host, local_ranks = max_local_ranks,
// cudart_version 12080.
//
// An absent [graphs.NAME] table is an all-zero Graph (TypeIntra and TypeInter LOC), as NCCL leaves
// unsearched graphs. Inside a present graph an absent key is zero as well: n_channels 0, bandwidths
// and latency 0, types LOC and same_channels false (NCCL's default for a searched graph is true, so
// write same_channels = true where the search would give it).
//
// The optional [env] table takes string values for the names of EnvVars (Source SourceTopology);
// NCCL_ALGO and NCCL_PROTO are checked with ParseAlgoEnv and ParseProtoEnv.
func DecodeTopology(file string, data []byte) (Topology, error) {
	if err := configfile.CheckTOML(file, data, topoMaxDepth); err != nil {
		return Topology{}, fmt.Errorf("capabilities: %w", err) // names file
	}
	t, err := decodeTopology(data)
	if err == nil {
		err = t.Validate()
	}
	if err != nil {
		return Topology{}, fmt.Errorf("capabilities: %s: %w", file, err)
	}
	return t, nil
}

// decodeTopology decodes text that configfile.CheckTOML has accepted.
func decodeTopology(data []byte) (Topology, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			if pe.LastKey != "" {
				return Topology{}, fmt.Errorf("line %d (key %s): %s", pe.Position.Line, pe.LastKey, pe.Message)
			}
			return Topology{}, fmt.Errorf("line %d: %s", pe.Position.Line, pe.Message)
		}
		return Topology{}, err
	}

	known := slices.Concat(topoIntKeys, topoStringKeys, topoBoolKeys, topoOtherKeys)
	if err := tomlCheckKeys(raw, "", known); err != nil {
		return Topology{}, err
	}
	var missing []string
	for _, k := range topoRequiredKeys {
		if _, ok := raw[k]; !ok {
			missing = append(missing, strconv.Quote(k))
		}
	}
	if len(missing) == 1 {
		return Topology{}, fmt.Errorf("missing required key %s", missing[0])
	} else if len(missing) > 1 {
		return Topology{}, fmt.Errorf("missing required keys %s", strings.Join(missing, ", "))
	}

	t := Topology{MaxTreePattern: defaultMaxTreePattern, NetDeviceType: NetHost, CUDARTVersion: defaultCUDARTVersion}
	ints := map[string]*int{"n_nodes": &t.NNodes, "n_ranks": &t.NRanks, "min_comp_cap": &t.MinCompCap,
		"max_comp_cap": &t.MaxCompCap, "nvs_count": &t.NVSCount, "collnet_heads_num": &t.CollNetHeadsNum,
		"collnet_direct_n_heads": &t.CollNetDirectNHeads, "max_tree_pattern": &t.MaxTreePattern,
		"comm_n_channels": &t.CommNChannels, "nvls_channels": &t.NVLSChannels,
		"max_local_ranks": &t.MaxLocalRanks, "local_ranks": &t.LocalRanks, "cudart_version": &t.CUDARTVersion}
	for _, k := range topoIntKeys {
		if err := tomlInt(raw, "", k, ints[k]); err != nil {
			return Topology{}, err
		}
	}
	if _, ok := raw["max_tree_pattern"]; ok && (t.MaxTreePattern < PatternBalancedTree || t.MaxTreePattern > PatternTree) {
		return Topology{}, fmt.Errorf("max_tree_pattern: must be 1..3, got %d", t.MaxTreePattern)
	}
	if _, ok := raw["local_ranks"]; !ok {
		t.LocalRanks = t.MaxLocalRanks
	}
	bools := map[string]*bool{"collnet_enable": &t.CollNetEnable, "collnet_chain_support": &t.CollNetChainSupport,
		"collnet_plugin_iallgather":     &t.CollNetPluginIAllGather,
		"collnet_plugin_ireducescatter": &t.CollNetPluginIReduceScatter, "nvls_support": &t.NVLSSupport}
	for _, k := range topoBoolKeys {
		if err := tomlBool(raw, "", k, bools[k]); err != nil {
			return Topology{}, err
		}
	}

	var err error
	if t.CPUArch, err = tomlEnum(raw, "", "cpu_arch", t.CPUArch, ParseCPUArch); err != nil {
		return Topology{}, err
	}
	if t.CPUVendor, err = tomlEnum(raw, "", "cpu_vendor", t.CPUVendor, ParseCPUVendor); err != nil {
		return Topology{}, err
	}
	if t.NetDeviceType, err = tomlEnum(raw, "", "net_device_type", t.NetDeviceType, ParseNetDeviceType); err != nil {
		return Topology{}, err
	}

	if v, ok := raw["collnet_support"]; ok {
		list, ok := v.([]any)
		if !ok {
			return Topology{}, fmt.Errorf("collnet_support: want an array of \"op:dtype\" strings, got %s", tomlDescribe(v))
		}
		for i, e := range list {
			s, ok := e.(string)
			if !ok {
				return Topology{}, fmt.Errorf("collnet_support[%d]: want an \"op:dtype\" string, got %s", i, tomlDescribe(e))
			}
			od, err := parseCollNetEntry(s)
			if err != nil {
				return Topology{}, fmt.Errorf("collnet_support[%d]: %w", i, err)
			}
			t.CollNetSupport = append(t.CollNetSupport, od)
		}
	}

	if t.Env, err = decodeEnvTable(raw); err != nil {
		return Topology{}, err
	}
	if err := decodeGraphs(raw, &t.Graphs); err != nil {
		return Topology{}, err
	}
	return t, nil
}

// decodeEnvTable reads the optional [env] table.
func decodeEnvTable(raw map[string]any) (Env, error) {
	var env Env
	v, ok := raw["env"]
	if !ok {
		return env, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return env, fmt.Errorf("env: want a table, got %s", tomlDescribe(v))
	}
	if err := tomlCheckKeys(m, "env.", EnvVars); err != nil {
		return env, err
	}
	for _, name := range EnvVars {
		var s string
		if err := tomlString(m, "env.", name, &s); err != nil {
			return env, err
		}
		if _, ok := m[name]; ok {
			*env.Var(name) = Setting{Value: s, Source: SourceTopology}
		}
	}
	if _, err := ParseAlgoEnv(env.Algo.Value); err != nil {
		return env, fmt.Errorf("env: %w", err)
	}
	if _, err := ParseProtoEnv(env.Proto.Value); err != nil {
		return env, fmt.Errorf("env: %w", err)
	}
	return env, nil
}

// decodeGraphs reads the optional [graphs.NAME] tables.
func decodeGraphs(raw map[string]any, gs *Graphs) error {
	v, ok := raw["graphs"]
	if !ok {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("graphs: want a table, got %s", tomlDescribe(v))
	}
	if err := tomlCheckKeys(m, "graphs.", topoGraphNames); err != nil {
		return err
	}
	dst := []*Graph{&gs.Tree, &gs.Ring, &gs.CollNetDirect, &gs.CollNetChain, &gs.NVLS}
	for i, name := range topoGraphNames {
		v, ok := m[name]
		if !ok {
			continue
		}
		path := "graphs." + name
		gm, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want a table, got %s", path, tomlDescribe(v))
		}
		if err := decodeGraph(gm, path+".", dst[i]); err != nil {
			return err
		}
	}
	return nil
}

func decodeGraph(m map[string]any, path string, g *Graph) error {
	if err := tomlCheckKeys(m, path, topoGraphKeys); err != nil {
		return err
	}
	if err := tomlInt(m, path, "n_channels", &g.NChannels); err != nil {
		return err
	}
	for _, f := range []struct {
		key string
		dst *float64
	}{{"bw_intra", &g.BwIntra}, {"bw_inter", &g.BwInter}, {"latency_inter", &g.LatencyInter}} {
		if err := tomlFloat(m, path, f.key, f.dst); err != nil {
			return err
		}
	}
	var err error
	if g.TypeIntra, err = tomlEnum(m, path, "type_intra", PathLOC, ParsePathType); err != nil {
		return err
	}
	if g.TypeInter, err = tomlEnum(m, path, "type_inter", PathLOC, ParsePathType); err != nil {
		return err
	}
	return tomlBool(m, path, "same_channels", &g.SameChannels)
}

// parseCollNetEntry parses one collnet_support entry, "op:dtype" (e.g. "sum:float32").
func parseCollNetEntry(s string) (OpDtype, error) {
	op, dt, ok := strings.Cut(s, ":")
	if !ok {
		return OpDtype{}, fmt.Errorf("want \"op:dtype\", got %q", s)
	}
	o, err := ParseOp(op)
	if err != nil {
		return OpDtype{}, err
	}
	d, err := ParseDtype(dt)
	if err != nil {
		return OpDtype{}, err
	}
	return OpDtype{Op: o, Dtype: d}, nil
}

// tomlCheckKeys reports the keys of m (prefixed by path in the message) that are not in known.
func tomlCheckKeys(m map[string]any, path string, known []string) error {
	var unknown []string
	for k := range m {
		if !slices.Contains(known, k) {
			unknown = append(unknown, strconv.Quote(path+k))
		}
	}
	switch len(unknown) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("unknown key %s", unknown[0])
	}
	slices.Sort(unknown)
	return fmt.Errorf("unknown keys %s", strings.Join(unknown, ", "))
}

// tomlInt sets *dst from the integer m[key] when present.
func tomlInt(m map[string]any, path, key string, dst *int) error {
	v, ok := m[key]
	if !ok {
		return nil
	}
	i, ok := v.(int64)
	if !ok {
		return fmt.Errorf("%s%s: want an integer, got %s", path, key, tomlDescribe(v))
	}
	if int64(int(i)) != i {
		return fmt.Errorf("%s%s: %d is out of range", path, key, i)
	}
	*dst = int(i)
	return nil
}

// tomlFloat sets *dst from the float (or integer literal) m[key] when present; it must be finite.
func tomlFloat(m map[string]any, path, key string, dst *float64) error {
	v, ok := m[key]
	if !ok {
		return nil
	}
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case int64:
		f = float64(x)
	default:
		return fmt.Errorf("%s%s: want a number, got %s", path, key, tomlDescribe(v))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("%s%s: want a finite number, got %v", path, key, f)
	}
	*dst = f
	return nil
}

// tomlBool sets *dst from the boolean m[key] when present.
func tomlBool(m map[string]any, path, key string, dst *bool) error {
	v, ok := m[key]
	if !ok {
		return nil
	}
	b, ok := v.(bool)
	if !ok {
		return fmt.Errorf("%s%s: want a boolean, got %s", path, key, tomlDescribe(v))
	}
	*dst = b
	return nil
}

// tomlString sets *dst from the string m[key] when present.
func tomlString(m map[string]any, path, key string, dst *string) error {
	v, ok := m[key]
	if !ok {
		return nil
	}
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("%s%s: want a string, got %s", path, key, tomlDescribe(v))
	}
	*dst = s
	return nil
}

// tomlEnum parses the string m[key] with parse when present, else returns def.
func tomlEnum[T any](m map[string]any, path, key string, def T, parse func(string) (T, error)) (T, error) {
	var s string
	if err := tomlString(m, path, key, &s); err != nil {
		return def, err
	}
	if _, ok := m[key]; !ok {
		return def, nil
	}
	v, err := parse(s)
	if err != nil {
		return def, fmt.Errorf("%s%s: %w", path, key, err)
	}
	return v, nil
}

// tomlDescribe names a decoded TOML value's type and shows the value, for error messages.
func tomlDescribe(v any) string {
	switch x := v.(type) {
	case int64:
		return "integer " + strconv.FormatInt(x, 10)
	case float64:
		return "float " + strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return "string " + strconv.Quote(x)
	case bool:
		return "boolean " + strconv.FormatBool(x)
	case time.Time:
		return "datetime"
	case []map[string]any:
		return "array of tables"
	case []any:
		return "array"
	case map[string]any:
		return "table"
	}
	return fmt.Sprintf("%T", v)
}

// EstimateTag is the source tag that marks an estimated input: a trailing "# estimate" comment on
// a key of a topology file (as in the node tables), for an input the file's writer did not know
// and took a documented default for (calibrate nccl-log does so for what a log lacks).
const EstimateTag = "estimate"

// LoadTopologyEstimates reads the topology file at path as LoadTopology does and also returns the
// dotted paths of the keys tagged "# estimate" (TopologyEstimates), which planner explain lists.
func LoadTopologyEstimates(path string) (Topology, []string, error) {
	data, err := configfile.Read(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return Topology{}, nil, fmt.Errorf("capabilities: %s: %w", path, pe.Err)
		}
		return Topology{}, nil, fmt.Errorf("capabilities: %w", err) // names path
	}
	t, err := DecodeTopology(path, data)
	if err != nil {
		return Topology{}, nil, err
	}
	return t, TopologyEstimates(data), nil
}

// TopologyEstimates returns, sorted, the dotted paths ("cpu_arch", "graphs.ring.latency_inter")
// of the keys of a topology file's text whose trailing comment is exactly EstimateTag. It reads
// the schema's shapes (top-level keys and [table] headers, one key per line); text that
// DecodeTopology refuses gives no guarantee.
func TopologyEstimates(data []byte) []string {
	var out []string
	table := ""
	for _, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(strings.TrimRight(raw, "\r"))
		code, comment := splitComment(line)
		code = strings.TrimSpace(code)
		switch {
		case strings.HasPrefix(code, "[") && strings.HasSuffix(code, "]"):
			table = strings.Trim(strings.TrimSpace(strings.Trim(code, "[]")), `"`)
			continue
		case comment != EstimateTag:
			continue
		}
		key, _, ok := strings.Cut(code, "=")
		if !ok {
			continue
		}
		key = strings.Trim(strings.TrimSpace(key), `"'`)
		if table != "" {
			key = table + "." + key
		}
		out = append(out, key)
	}
	slices.Sort(out)
	return out
}

// splitComment cuts a TOML line at its comment's "#" (one outside a string) and returns the code
// and the comment's trimmed text ("" when there is none).
func splitComment(line string) (string, string) {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#':
			return line[:i], strings.TrimSpace(line[i+1:])
		}
	}
	return line, ""
}
