package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/collplan/collplan/report"
	"github.com/collplan/collplan/tables"
)

// MapRequest is POST /v1/map: one class (a Query without bytes or nodes) over the sizes [Min,
// Max] (default 8 B to 16 GiB), at each node count of NodeCounts (default 1, 2, 4 ... 4096 and the
// node table's own scales; a topology has its one).
type MapRequest struct {
	Query
	Min        json.RawMessage `json:"min,omitempty"`
	Max        json.RawMessage `json:"max,omitempty"`
	NodeCounts []int           `json:"node_counts,omitempty"`
}

// Map is /v1/map's answer: per node count, the bands of sizes with one plan each.
type Map struct {
	Coll       string   `json:"coll"`
	Op         string   `json:"op"`
	Dtype      string   `json:"dtype"`
	PipeOps    int      `json:"pipe_ops"`
	Min        int64    `json:"min"`
	Max        int64    `json:"max"`
	Generation uint64   `json:"generation"`
	Rows       []MapRow `json:"rows"`
}

// MapRow is one node count: its topology, the policy that made its plans, and its bands in size
// order (each band's Lo after the first is a crossover); Error says why a node count has no plan.
type MapRow struct {
	Nodes    int    `json:"nodes"`
	NRanks   int    `json:"n_ranks"`
	Topology string `json:"topology"`
	Policy   string `json:"policy"`
	Bands    []Band `json:"bands"`
	Error    string `json:"error,omitempty"`
}

// Band is a run of sizes [Lo, Hi] (both included) with one (algorithm, protocol) pick; TimeLoUS
// and TimeHiUS are the model's time of the pick at Lo and at Hi.
type Band struct {
	Lo       int64      `json:"lo"`
	Hi       int64      `json:"hi"`
	Algo     string     `json:"algo"`
	Proto    string     `json:"proto"`
	TimeLoUS report.F32 `json:"time_lo_us"`
	TimeHiUS report.F32 `json:"time_hi_us"`
}

// defaultMapMax is the map's default largest size, 16 GiB.
const defaultMapMax = 16 << 30

// maxMapRows bounds the node counts of one map.
const maxMapRows = 64

func (s *Server) mapClass(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var req MapRequest
	if ae := decodeJSON(bytesReader(body), &req); ae != nil {
		return ae
	}
	if req.Nodes != nil {
		return badRequest("nodes", "a map covers node counts: give node_counts, not nodes")
	}
	lo, hi := int64(8), int64(defaultMapMax)
	if len(req.Min) > 0 {
		var ae *apiError
		if lo, ae = parseSize("min", req.Min, 1); ae != nil {
			return ae
		}
	}
	if len(req.Max) > 0 {
		var ae *apiError
		if hi, ae = parseSize("max", req.Max, 1); ae != nil {
			return ae
		}
	}
	if hi < lo {
		return badRequest("max", "max %d is below min %d", hi, lo)
	}
	if len(req.NodeCounts) > maxMapRows {
		return badRequest("node_counts", "%d node counts: at most %d", len(req.NodeCounts), maxMapRows)
	}
	for i, n := range req.NodeCounts {
		if n < 1 || n > maxNodes {
			return badRequest(fmt.Sprintf("node_counts[%d]", i), "node count %d: want 1..%d", n, maxNodes)
		}
	}
	st := s.acquire()
	defer st.release()
	res, ae := st.resolve(&req.Query, false)
	if ae != nil {
		return ae
	}
	counts := req.NodeCounts
	if req.Topology != "" {
		if len(counts) > 0 {
			return badRequest("node_counts", "a topology has its own node count: node_counts applies to node")
		}
		counts = []int{0}
	} else if len(counts) == 0 {
		counts = defaultNodeCounts(req.Node)
	}
	out := Map{Coll: res.cls.Coll.String(), Op: res.cls.Op.String(), Dtype: res.cls.Dtype.String(), PipeOps: res.cls.PipeOps,
		Min: lo, Max: hi, Generation: st.gen, Rows: []MapRow{}}
	for _, n := range counts {
		rr := *res
		if n > 0 {
			rr.spec.Nodes, rr.spec.NodesGiven = n, true
		}
		row, err := s.mapRow(r, st, &rr, lo, hi)
		if err != nil {
			return err
		}
		out.Rows = append(out.Rows, row)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// mapRow compiles one node count's decision table and cuts it to [lo, hi]. Bad input of the
// whole request is an error; a node count the model cannot plan is a row with an error.
func (s *Server) mapRow(r *http.Request, st *set, res *resolved, lo, hi int64) (MapRow, error) {
	row := MapRow{Nodes: res.spec.Nodes, Bands: []Band{}}
	c, err := st.class(r.Context(), res, s.compiles)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.status == http.StatusBadRequest && ae.field == "" {
			row.Error = ae.msg
			return row, nil
		}
		return row, err
	}
	t := &c.b.setup.Topo
	row.Nodes, row.NRanks, row.Topology, row.Policy = t.NNodes, t.NRanks, c.b.setup.Source, c.policy
	dt, err := c.table()
	if err != nil {
		row.Error = err.Error()
		return row, nil
	}
	m := c.pr.Menu()
	for _, e := range dt.Entries() {
		if e.Hi <= lo || e.Lo > hi { // e covers [Lo, Hi)
			continue
		}
		b := Band{Lo: max(e.Lo, lo), Hi: min(e.Hi-1, hi), Algo: e.Algo.String(), Proto: e.Proto.String()}
		if k := len(row.Bands) - 1; k >= 0 && row.Bands[k].Algo == b.Algo && row.Bands[k].Proto == b.Proto {
			row.Bands[k].Hi = b.Hi // the sizing changed, not the pick
		} else {
			row.Bands = append(row.Bands, b)
		}
	}
	for i := range row.Bands {
		b := &row.Bands[i]
		a, p := dt.Lookup(b.Lo).Algo, dt.Lookup(b.Lo).Proto
		b.TimeLoUS, b.TimeHiUS = report.F32(m.Time(a, p, b.Lo)), report.F32(m.Time(a, p, b.Hi))
	}
	return row, nil
}

// defaultNodeCounts is 1, 2, 4 ... 4096 and the node counts of the table's scales.
func defaultNodeCounts(name string) []int {
	var out []int
	for n := 1; n <= 4096; n *= 2 {
		out = append(out, n)
	}
	if t, err := tables.Load(name); err == nil {
		for k := range t.Scale {
			if n, err := strconv.Atoi(k); err == nil && n >= 1 && n <= maxNodes {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
