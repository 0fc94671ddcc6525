package service

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/plugin/shimtable"
	"github.com/collplan/collplan/report"
	"github.com/collplan/collplan/tables"
)

// CompileRequest is POST /v1/compile: planner compile's flags. Exactly one of Node (with its grid:
// NodeCounts, default 1, 2, 4 ... 1024, and RanksPerNode, default the table's GPUs per node and 1)
// or Topology (one block).
type CompileRequest struct {
	Node         string `json:"node,omitempty"`
	Topology     string `json:"topology,omitempty"`
	NodeCounts   []int  `json:"node_counts,omitempty"`
	RanksPerNode []int  `json:"ranks_per_node,omitempty"`
	PipeOps      *int   `json:"pipe_ops,omitempty"` // numPipeOps compiled are 1..PipeOps (default 4, at most 64)
	Ranked       *int   `json:"ranked,omitempty"`   // ranked plans per interval (default 4, 1..8)
	Constants    bool   `json:"constants,omitempty"`
	NoOverlay    bool   `json:"no_overlay,omitempty"`
	Fabric       string `json:"fabric,omitempty"`
}

// maxCompileBlocks bounds the grid of one compile (node counts x ranks per node).
const maxCompileBlocks = 64

// compileReq checks r into shimtable's request; every error names the field.
func (st *set) compileReq(r *CompileRequest) (shimtable.Request, string, *apiError) {
	req := shimtable.Request{MaxPipeOps: 4, K: 4, Constants: r.Constants}
	if r.PipeOps != nil {
		if *r.PipeOps < 1 || *r.PipeOps > 64 {
			return req, "", badRequest("pipe_ops", "pipe_ops %d: want 1..64", *r.PipeOps)
		}
		req.MaxPipeOps = *r.PipeOps
	}
	if r.Ranked != nil {
		if *r.Ranked < 1 || *r.Ranked > 8 {
			return req, "", badRequest("ranked", "ranked %d: want 1..8", *r.Ranked)
		}
		req.K = *r.Ranked
	}
	ints := func(field string, v []int, hi int) *apiError {
		for i, n := range v {
			if n < 1 || n > hi {
				return badRequest(fmt.Sprintf("%s[%d]", field, i), "%s %d: want 1..%d", field, n, hi)
			}
		}
		return nil
	}
	if ae := ints("node_counts", r.NodeCounts, maxNodes); ae != nil {
		return req, "", ae
	}
	if ae := ints("ranks_per_node", r.RanksPerNode, maxGPUsPerNode); ae != nil {
		return req, "", ae
	}
	switch {
	case r.Node != "" && r.Topology != "":
		return req, "", badRequest("node", "give one of node or topology, not both")
	case r.Topology != "":
		if len(r.NodeCounts) > 0 || len(r.RanksPerNode) > 0 || r.NoOverlay || r.Fabric != "" {
			return req, "", badRequest("topology", "node_counts, ranks_per_node, no_overlay and fabric apply to a node table, not a topology")
		}
		t, ok := st.topologies[r.Topology]
		if !ok {
			return req, "", badRequest("topology", "unknown topology %q (the service has %s)", r.Topology, names(st.topologies))
		}
		tp, err := capabilities.DecodeTopology(t.file, t.data)
		if err != nil {
			return req, "", badRequest("topology", "%v", err)
		}
		req.Topology = &tp
		return req, "topology", nil
	case r.Node == "":
		return req, "", badRequest("node", "give one of node (an embedded node table, GET /v1/tables) or topology")
	}
	tf, isFile := st.tables[r.Node]
	if !isTable(r.Node) && !isFile {
		return req, "", badRequest("node", "unknown node table %q (GET /v1/tables lists them)", r.Node)
	}
	if r.Fabric != "" && !isFabric(r.Fabric) {
		return req, "", badRequest("fabric", "unknown fabric table %q (GET /v1/tables lists them)", r.Fabric)
	}
	var n *tables.Node
	var err error
	switch {
	case isFile && r.NoOverlay:
		n = tf.base
	case isFile:
		n = tf.full
	default:
		if n, err = report.LoadNode(r.Node, "", r.NoOverlay); err != nil {
			return req, "", badRequest("node", "%v", err)
		}
	}
	if n, _, err = report.WithFabric(n, r.Fabric); err != nil {
		return req, "", badRequest("fabric", "%v", err)
	}
	nodes, rpns := len(r.NodeCounts), len(r.RanksPerNode)
	if nodes == 0 {
		nodes = len(shimtable.DefaultNodes())
	}
	if rpns == 0 {
		rpns = 2
	}
	if nodes*rpns > maxCompileBlocks {
		return req, "", badRequest("node_counts", "%d node counts x %d ranks per node: at most %d blocks", nodes, rpns, maxCompileBlocks)
	}
	req.Node, req.Nodes, req.RanksPerNode = n, r.NodeCounts, r.RanksPerNode
	return req, r.Node, nil
}

// compile is POST /v1/compile: the shim's decision table (docs/tuner-table.md), as planner compile
// writes it, as a download. It takes a compile turn.
func (s *Server) compile(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var req CompileRequest
	if ae := decodeJSON(bytesReader(body), &req); ae != nil {
		return ae
	}
	st := s.acquire()
	defer st.release()
	sreq, name, ae := st.compileReq(&req)
	if ae != nil {
		return ae
	}
	if err := s.compiles.acquire(r.Context()); err != nil {
		return err
	}
	t, err := shimtable.Compile(r.Context(), sreq)
	s.compiles.release()
	if err != nil {
		return badRequest("", "%v", err)
	}
	data, err := t.Encode()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name+".cptt"))
	w.Header().Set("Collplan-Checksum", fmt.Sprintf("%016x", shimtable.Checksum(data)))
	w.Header().Set("Collplan-Blocks", strconv.Itoa(len(t.Blocks)))
	w.Header().Set("Collplan-Generation", strconv.FormatUint(st.gen, 10))
	_, _ = w.Write(data)
	return nil
}
