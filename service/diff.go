package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/report"
	"github.com/collplan/collplan/tables"
)

// DiffSide is one side of POST /v1/diff: an embedded node table (Node) or an uploaded one
// (TableTOML, decoded as strictly as a file), optionally with an uploaded fitted overlay
// (OverlayTOML) applied instead of its own, or without its overlay (NoOverlay); and a tuner of the
// service's set.
type DiffSide struct {
	Node        string `json:"node,omitempty"`
	TableTOML   string `json:"table_toml,omitempty"`
	OverlayTOML string `json:"overlay_toml,omitempty"`
	NoOverlay   bool   `json:"no_overlay,omitempty"`
	Tuner       string `json:"tuner,omitempty"`
}

// DiffRequest is POST /v1/diff: two sides, and the class, sizes and node counts to compare them
// over (defaults: every collective, float32 sum, pipe ops 1, 8 B to 16 GiB, node counts 1, 2, 4
// ... 4096 and the tables' scales). Fabric, GPUsPerNode, Algo and Proto apply to both sides.
type DiffRequest struct {
	A           DiffSide        `json:"a"`
	B           DiffSide        `json:"b"`
	Colls       []string        `json:"colls,omitempty"`
	Dtype       string          `json:"dtype,omitempty"`
	Op          string          `json:"op,omitempty"`
	PipeOps     *int            `json:"pipe_ops,omitempty"`
	Min         json.RawMessage `json:"min,omitempty"`
	Max         json.RawMessage `json:"max,omitempty"`
	NodeCounts  []int           `json:"node_counts,omitempty"`
	Fabric      string          `json:"fabric,omitempty"`
	GPUsPerNode *int            `json:"gpus_per_node,omitempty"`
	Algo        string          `json:"algo,omitempty"`
	Proto       string          `json:"proto,omitempty"`
}

// diffSide builds one side; errors name the field under prefix ("a", "b").
func (st *set) diffSide(prefix string, d *DiffSide, fabric string) (report.Side, *apiError) {
	var sd report.Side
	var n *tables.Node
	var label string
	var err error
	switch {
	case d.Node != "" && d.TableTOML != "":
		return sd, badRequest(prefix+".node", "give one of node or table_toml, not both")
	case d.OverlayTOML != "" && d.NoOverlay:
		return sd, badRequest(prefix+".no_overlay", "give one of overlay_toml or no_overlay")
	case d.TableTOML != "":
		file := "upload-" + prefix + ".toml"
		if n, err = tables.Decode(file, []byte(d.TableTOML)); err != nil {
			return sd, badRequest(prefix+".table_toml", "%v", err)
		}
		label = file + " (uploaded)"
	case d.Node == "":
		return sd, badRequest(prefix+".node", "give node (an embedded node table) or table_toml")
	case st.tables[d.Node].file != "":
		// A --table file, as planner diff --a FILE labels it.
		tf := st.tables[d.Node]
		n, label = tf.full, tf.full.File
		switch {
		case d.NoOverlay || d.OverlayTOML != "":
			n, label = tf.base, tf.base.File+" (no overlay)"
		case n.Overlay != "":
			label += fmt.Sprintf(" (overlay %s)", n.Overlay)
		}
	case !isTable(d.Node):
		return sd, badRequest(prefix+".node", "unknown node table %q (GET /v1/tables lists them)", d.Node)
	default:
		// With an uploaded overlay, the table alone: the upload replaces its own overlay.
		if n, label, err = report.SideTable(d.Node, d.NoOverlay || d.OverlayTOML != "", "", nil); err != nil {
			return sd, badRequest(prefix+".node", "%v", err)
		}
	}
	if d.OverlayTOML != "" {
		file := "upload-" + prefix + ".fit.toml"
		if n, err = tables.ApplyOverlay(n, file, []byte(d.OverlayTOML)); err != nil {
			return sd, badRequest(prefix+".overlay_toml", "%v", err)
		}
		label = strings.TrimSuffix(label, " (no overlay)") + " + overlay " + file + " (uploaded)"
	}
	if fabric != "" {
		if n, _, err = report.WithFabric(n, fabric); err != nil {
			return sd, badRequest("fabric", "%v", err)
		}
	}
	var tc *plugin.Client
	if d.Tuner != "" && !strings.EqualFold(d.Tuner, "none") {
		var ok bool
		if tc, ok = st.tuners[d.Tuner]; !ok {
			return sd, badRequest(prefix+".tuner", "unknown tuner %q (the service has %s)", d.Tuner, names(st.tuners))
		}
		label += " under tuner " + d.Tuner
	}
	return report.Side{Spec: report.Spec{Node: n.Name, Loaded: n}, Tuner: tc, Label: label}, nil
}

// diff is POST /v1/diff: planner diff --json for the same sides. It takes one compile turn.
func (s *Server) diff(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var req DiffRequest
	if ae := decodeJSON(bytesReader(body), &req); ae != nil {
		return ae
	}
	q := Query{Coll: "allreduce", Dtype: req.Dtype, Op: req.Op, PipeOps: req.PipeOps}
	cls, ae := classOnly(&q)
	if ae != nil {
		return ae
	}
	opt := report.DiffOptions{Class: cls, Min: 8, Max: defaultMapMax}
	if len(req.Colls) == 0 {
		for c := capabilities.Coll(0); c < capabilities.NumColls; c++ {
			opt.Colls = append(opt.Colls, c)
		}
	}
	for i, c := range req.Colls {
		coll, err := capabilities.ParseColl(c)
		if err != nil {
			return badRequest(fmt.Sprintf("colls[%d]", i), "%v", err)
		}
		opt.Colls = append(opt.Colls, coll)
	}
	if len(req.Min) > 0 {
		if opt.Min, ae = parseSize("min", req.Min, 1); ae != nil {
			return ae
		}
	}
	if len(req.Max) > 0 {
		if opt.Max, ae = parseSize("max", req.Max, 1); ae != nil {
			return ae
		}
	}
	if opt.Max < opt.Min {
		return badRequest("max", "max %d is below min %d", opt.Max, opt.Min)
	}
	if len(req.NodeCounts) > maxMapRows {
		return badRequest("node_counts", "%d node counts: at most %d", len(req.NodeCounts), maxMapRows)
	}
	for i, n := range req.NodeCounts {
		if n < 1 || n > maxNodes {
			return badRequest(fmt.Sprintf("node_counts[%d]", i), "node count %d: want 1..%d", n, maxNodes)
		}
	}
	if req.Fabric != "" && !isFabric(req.Fabric) {
		return badRequest("fabric", "unknown fabric table %q (GET /v1/tables lists them)", req.Fabric)
	}
	if req.GPUsPerNode != nil && (*req.GPUsPerNode < 1 || *req.GPUsPerNode > maxGPUsPerNode) {
		return badRequest("gpus_per_node", "gpus_per_node %d: want 1..%d", *req.GPUsPerNode, maxGPUsPerNode)
	}
	for _, f := range []struct {
		field, v string
		parse    func(string) error
	}{
		{"algo", req.Algo, func(s string) error { _, err := capabilities.ParseAlgoEnv(s); return err }},
		{"proto", req.Proto, func(s string) error { _, err := capabilities.ParseProtoEnv(s); return err }},
	} {
		if len(f.v) > maxFilterLen {
			return badRequest(f.field, "%s: longer than %d characters", f.field, maxFilterLen)
		}
		if f.v != "" {
			if err := f.parse(f.v); err != nil {
				return badRequest(f.field, "%v", err)
			}
		}
	}
	st := s.acquire()
	defer st.release()
	a, ae := st.diffSide("a", &req.A, req.Fabric)
	if ae != nil {
		return ae
	}
	b, ae := st.diffSide("b", &req.B, req.Fabric)
	if ae != nil {
		return ae
	}
	for _, sd := range []*report.Side{&a, &b} {
		if req.GPUsPerNode != nil {
			sd.Spec.GPUsPerNode, sd.Spec.GPUsPerNodeGiven = *req.GPUsPerNode, true
		}
		sd.Spec.Algo, sd.Spec.Proto = req.Algo, req.Proto
	}
	opt.NodeCounts = req.NodeCounts
	if len(opt.NodeCounts) == 0 {
		opt.NodeCounts = report.DefaultNodeCounts(a.Spec.Loaded, b.Spec.Loaded)
	}
	if err := s.compiles.acquire(r.Context()); err != nil {
		return err
	}
	d, err := report.NewDiff(r.Context(), a, b, opt)
	s.compiles.release()
	if err != nil {
		return specError(err)
	}
	w.Header().Set("Collplan-Generation", strconv.FormatUint(st.gen, 10))
	writeJSON(w, http.StatusOK, d)
	return nil
}
