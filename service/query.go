package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/report"
	"github.com/collplan/collplan/tables"
)

// Bounds on a query's numbers beyond what the planner checks; each error names its field.
const (
	maxNodes       = 65536
	maxGPUsPerNode = 1024
	maxPipeOps     = 1 << 16
	maxFilterLen   = 256
)

// Query is one collective call, the fields of planner explain's flags: exactly one of Node (an
// embedded node table) or Topology (a topology the service was started with, by name), then the
// shape, the call and the tuner (a name from the service's set; "" or "none" for none). Absent
// fields take the flags' defaults.
type Query struct {
	Node        string          `json:"node,omitempty"`
	Topology    string          `json:"topology,omitempty"`
	Nodes       *int            `json:"nodes,omitempty"`
	GPUsPerNode *int            `json:"gpus_per_node,omitempty"`
	Fabric      string          `json:"fabric,omitempty"`
	NoOverlay   bool            `json:"no_overlay,omitempty"`
	Coll        string          `json:"coll,omitempty"`
	Bytes       json.RawMessage `json:"bytes,omitempty"` // a number or a size string ("1MiB")
	Op          string          `json:"op,omitempty"`
	Dtype       string          `json:"dtype,omitempty"`
	PipeOps     *int            `json:"pipe_ops,omitempty"`
	RegBuff     bool            `json:"reg_buff,omitempty"`
	Algo        string          `json:"algo,omitempty"`
	Proto       string          `json:"proto,omitempty"`
	Tuner       string          `json:"tuner,omitempty"`
}

// resolved is a checked query: the topology spec, the tuner name ("" for none), the class and
// the size.
type resolved struct {
	spec  report.Spec
	tuner string
	cls   planner.Class
	bytes int64
}

// plannerKey names the planner a query needs: its topology spec and tuner.
type plannerKey struct {
	node, topology, fabric string
	nodes, gpn             int
	algo, proto            string
	noOverlay              bool
	tuner                  string
}

func (r *resolved) key() plannerKey {
	sp := &r.spec
	return plannerKey{sp.Node + sp.Table, sp.Topology, sp.Fabric, sp.Nodes, sp.GPUsPerNode, sp.Algo, sp.Proto, sp.NoOverlay, r.tuner}
}

// The embedded node and fabric tables' names, read once (they are compiled in).
var (
	tableSet  = sync.OnceValue(func() map[string]bool { return setOf(tables.Names()) })
	fabricSet = sync.OnceValue(func() map[string]bool { return setOf(tables.FabricNames()) })
)

func setOf(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

func isTable(name string) bool  { return tableSet()[name] }
func isFabric(name string) bool { return fabricSet()[name] }

// classOnly checks the class fields of q (coll, op, dtype, pipe ops, reg buff).
func classOnly(q *Query) (planner.Class, *apiError) {
	var cls planner.Class
	var err error
	coll, op, dtype := orDefault(q.Coll, "allreduce"), orDefault(q.Op, "sum"), orDefault(q.Dtype, "float32")
	var ok bool
	if cls.Coll, ok = canonical().colls[coll]; !ok {
		if cls.Coll, err = capabilities.ParseColl(coll); err != nil {
			return cls, badRequest("coll", "%v", err)
		}
	}
	if cls.Op, ok = canonical().ops[op]; !ok {
		if cls.Op, err = capabilities.ParseOp(op); err != nil {
			return cls, badRequest("op", "%v", err)
		}
	}
	if cls.Dtype, ok = canonical().dtypes[dtype]; !ok {
		if cls.Dtype, err = capabilities.ParseDtype(dtype); err != nil {
			return cls, badRequest("dtype", "%v", err)
		}
	}
	cls.PipeOps = 1
	if q.PipeOps != nil {
		if *q.PipeOps < 1 || *q.PipeOps > maxPipeOps {
			return cls, badRequest("pipe_ops", "pipe_ops %d: want 1..%d", *q.PipeOps, maxPipeOps)
		}
		cls.PipeOps = *q.PipeOps
	}
	cls.RegBuff = q.RegBuff
	return cls, nil
}

// canonical maps the enums' own names (and their lower case) to their values, so that the common
// spellings skip the parsers' allocations; anything else goes to the parsers.
var canonical = sync.OnceValue(func() (m struct {
	colls  map[string]capabilities.Coll
	ops    map[string]capabilities.Op
	dtypes map[string]capabilities.Dtype
}) {
	m.colls, m.ops, m.dtypes = map[string]capabilities.Coll{}, map[string]capabilities.Op{}, map[string]capabilities.Dtype{}
	for c := capabilities.Coll(0); c < capabilities.NumColls; c++ {
		m.colls[c.String()], m.colls[strings.ToLower(c.String())] = c, c
	}
	for o := capabilities.Op(0); o < capabilities.NumOps; o++ {
		m.ops[o.String()] = o
	}
	for d := capabilities.Dtype(0); d < capabilities.NumDtypes; d++ {
		m.dtypes[d.String()] = d
	}
	return m
})

// resolve checks q against the set (its topologies and tuners) and the bounds; every error names
// the field. withBytes says bytes is required (explain, plan) rather than refused (map).
func (st *set) resolve(q *Query, withBytes bool) (*resolved, *apiError) {
	r := &resolved{}
	sp := &r.spec
	switch {
	case q.Node != "" && q.Topology != "":
		return nil, badRequest("node", "give one of node or topology, not both")
	case q.Node == "" && q.Topology == "":
		return nil, badRequest("node", "give one of node (an embedded node table, GET /v1/tables) or topology")
	case q.Node != "":
		if tf, ok := st.tables[q.Node]; ok {
			// A --table file, as planner explain --table FILE: its overlay is the one read with it.
			sp.Table, sp.Loaded = tf.file, tf.full
			if q.NoOverlay {
				sp.Loaded = tf.base
			}
			break
		}
		if !isTable(q.Node) {
			return nil, badRequest("node", "unknown node table %q (GET /v1/tables lists them)", q.Node)
		}
		sp.Node = q.Node
	default:
		t, ok := st.topologies[q.Topology]
		if !ok {
			return nil, badRequest("topology", "unknown topology %q (the service has %s)", q.Topology, names(st.topologies))
		}
		sp.Topology, sp.TopologyData = t.file, t.data
	}
	sp.Nodes = 1
	if q.Nodes != nil {
		if *q.Nodes < 1 || *q.Nodes > maxNodes {
			return nil, badRequest("nodes", "nodes %d: want 1..%d", *q.Nodes, maxNodes)
		}
		sp.Nodes, sp.NodesGiven = *q.Nodes, true
	}
	if q.GPUsPerNode != nil {
		if *q.GPUsPerNode < 1 || *q.GPUsPerNode > maxGPUsPerNode {
			return nil, badRequest("gpus_per_node", "gpus_per_node %d: want 1..%d", *q.GPUsPerNode, maxGPUsPerNode)
		}
		sp.GPUsPerNode, sp.GPUsPerNodeGiven = *q.GPUsPerNode, true
	}
	if q.Fabric != "" && !isFabric(q.Fabric) {
		return nil, badRequest("fabric", "unknown fabric table %q (GET /v1/tables lists them; a request names no file)", q.Fabric)
	}
	sp.Fabric, sp.NoOverlay = q.Fabric, q.NoOverlay
	for _, f := range []struct {
		field, v string
		parse    func(string) error
	}{
		{"algo", q.Algo, func(s string) error { _, err := capabilities.ParseAlgoEnv(s); return err }},
		{"proto", q.Proto, func(s string) error { _, err := capabilities.ParseProtoEnv(s); return err }},
	} {
		if len(f.v) > maxFilterLen {
			return nil, badRequest(f.field, "%s: longer than %d characters", f.field, maxFilterLen)
		}
		if f.v != "" {
			if err := f.parse(f.v); err != nil {
				return nil, badRequest(f.field, "%v", err)
			}
		}
	}
	sp.Algo, sp.Proto = q.Algo, q.Proto
	if q.Tuner != "" && !strings.EqualFold(q.Tuner, "none") {
		if _, ok := st.tuners[q.Tuner]; !ok {
			return nil, badRequest("tuner", "unknown tuner %q (the service has %s)", q.Tuner, names(st.tuners))
		}
		r.tuner = q.Tuner
	}
	var ae *apiError
	if r.cls, ae = classOnly(q); ae != nil {
		return nil, ae
	}
	switch {
	case withBytes && len(q.Bytes) == 0:
		return nil, badRequest("bytes", "bytes is required")
	case !withBytes && len(q.Bytes) != 0:
		return nil, badRequest("bytes", "bytes does not apply here (give min and max)")
	case withBytes:
		var err *apiError
		if r.bytes, err = parseSize("bytes", q.Bytes, 0); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// parseSize reads a size field: a JSON integer or a size string ("4K", "1MiB"), in [lo,
// planner.MaxBytes].
func parseSize(field string, raw json.RawMessage, lo int64) (int64, *apiError) {
	s := string(bytes.TrimSpace(raw))
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, badRequest(field, "%s: %v", field, err)
		}
	} else if _, err := strconv.ParseInt(s, 10, 64); err != nil {
		return 0, badRequest(field, "%s: want an integer or a size string such as \"1MiB\", got %s", field, s)
	}
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, badRequest(field, "%s: %v", field, err)
	}
	if n < lo || n > planner.MaxBytes {
		return 0, badRequest(field, "%s %d: want %d..%d", field, n, lo, planner.MaxBytes)
	}
	return n, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// names lists a map's keys, sorted, for an error message.
func names[V any](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for k := range m {
		out = append(out, fmt.Sprintf("%q", k))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// decodeJSON decodes one JSON value of r's body into v strictly: unknown fields, wrong types,
// trailing data and bodies over the limit are errors naming the field or the limit.
func decodeJSON(r io.Reader, v any) *apiError {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err != nil {
			return decodeError(err)
		}
		return badRequest("", "malformed JSON: data after the request's value")
	}
	return nil
}

// decodeError turns an encoding/json error into a 4xx naming what is wrong.
func decodeError(err error) *apiError {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &mb):
		return &apiError{status: http.StatusRequestEntityTooLarge,
			msg: fmt.Sprintf("request body over the max-body-bytes limit (%d bytes)", mb.Limit)}
	case errors.As(err, &se):
		return badRequest("", "malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		field := te.Field
		return badRequest(field, "%s: want a JSON %s, got %s", orDefault(field, "request"), jsonType(te.Type.Kind().String()), te.Value)
	case errors.Is(err, io.EOF):
		return badRequest("", "empty request body: want a JSON value")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "malformed JSON: the body ends inside a value")
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		f, _ = strconv.Unquote(f)
		return badRequest(f, "unknown field %q", f)
	}
	return badRequest("", "malformed JSON: %s", strings.TrimPrefix(msg, "json: "))
}

// jsonType names a Go kind as a JSON type.
func jsonType(kind string) string {
	switch kind {
	case "int", "int64", "int32", "uint", "uint64", "float64", "float32":
		return "number"
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "struct", "map", "ptr":
		return "object"
	}
	return kind
}

// queries reads the body of explain or plan: one Query object, or an array of them (a batch, up
// to max). batch says which.
func queries(body []byte, max int) (qs []Query, batch bool, _ *apiError) {
	trim := bytes.TrimLeft(body, " \t\r\n")
	if len(trim) > 0 && trim[0] == '[' {
		// The fast path decodes the whole batch at once; when it fails, the slow path below
		// decodes query by query to name the one at fault.
		if err := decodeJSON(bytes.NewReader(body), &qs); err == nil && len(qs) <= max && len(qs) > 0 {
			return qs, true, nil
		}
		qs = nil
		var raw []json.RawMessage
		if err := decodeJSON(bytes.NewReader(body), &raw); err != nil {
			return nil, true, err
		}
		if len(raw) > max {
			return nil, true, &apiError{status: http.StatusRequestEntityTooLarge,
				msg: fmt.Sprintf("batch of %d queries over the max-batch limit (%d)", len(raw), max)}
		}
		if len(raw) == 0 {
			return nil, true, badRequest("", "empty batch: want at least one query")
		}
		qs = make([]Query, len(raw))
		for i, m := range raw {
			if err := decodeJSON(bytes.NewReader(m), &qs[i]); err != nil {
				return nil, true, inField(fmt.Sprintf("[%d]", i), err)
			}
		}
		return qs, true, nil
	}
	var q Query
	if err := decodeJSON(bytes.NewReader(body), &q); err != nil {
		return nil, false, err
	}
	return []Query{q}, false, nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
