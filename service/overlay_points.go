package service

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
)

// The web map's overlays: an uploaded nccl-tests sweep as measured points (POST
// /v1/overlay/sweep) and an uploaded NCCL log as NCCL's own logged decisions (POST
// /v1/overlay/tuning), both read by the calibrate package's parsers and answered as JSON on the
// map's axes (model bytes, node count).

// Upload is the body of the overlay endpoints: the text of one file and the name its problems
// are reported under (a name only, never opened).
type Upload struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// Measured is /v1/overlay/sweep's answer: every run of the uploaded nccl-tests (or collbench)
// output, and the rows and file-level remarks the parser rejected or warned about.
type Measured struct {
	File     string          `json:"file"`
	Runs     []MeasuredRun   `json:"runs"`
	Problems []UploadProblem `json:"problems"`
}

// MeasuredRun is one run of a sweep: its collective ("" when nothing names one a model prices),
// type and op as printed, the shape from its rank lines (0 when the preamble does not say), the
// NCCL_ALGO/NCCL_PROTO pin ("" for free choice) and one point per table row.
type MeasuredRun struct {
	Line        int             `json:"line"`
	Coll        string          `json:"coll"`
	Dtype       string          `json:"dtype"`
	Op          string          `json:"op"`
	Nodes       int             `json:"nodes"`
	GPUsPerNode int             `json:"gpus_per_node"`
	Ranks       int             `json:"ranks"`
	GPU         string          `json:"gpu"`
	Algo        string          `json:"algo"`
	Proto       string          `json:"proto"`
	Points      []MeasuredPoint `json:"points"`
}

// MeasuredPoint is one table row: its size as printed (NCCL's model nBytes, the full buffer for
// AllGather and ReduceScatter) and the out-of-place and in-place times in µs, each with whether
// it may be believed (#wrong 0, error within tolerance, positive time).
type MeasuredPoint struct {
	Line       int     `json:"line"`
	Bytes      int64   `json:"bytes"`
	OOPUS      float64 `json:"oop_us"`
	OOPValid   bool    `json:"oop_valid"`
	InPlaceUS  float64 `json:"ip_us"`
	InPlaceVal bool    `json:"ip_valid"`
}

// UploadProblem is one line of an upload the parser rejected or warned about.
type UploadProblem struct {
	Line int    `json:"line"`
	Msg  string `json:"msg"`
}

// Logged is /v1/overlay/tuning's answer: the decisions of an NCCL log's TUNING lines, one entry
// per distinct (collective, size, algorithm, protocol), and the communicator's shape from its
// init lines (0 when the log does not say).
type Logged struct {
	File        string           `json:"file"`
	NCCLVersion string           `json:"nccl_version"`
	Nodes       int              `json:"nodes"`
	Ranks       int              `json:"ranks"`
	Decisions   []LoggedDecision `json:"decisions"`
	Problems    []UploadProblem  `json:"problems"`
}

// LoggedDecision is one decision NCCL logged. Bytes is as printed (count × element size, per
// rank for AllGather and ReduceScatter); NBytes is the model's size on the map's axis (Bytes ×
// ranks for AllGather and ReduceScatter, reference/nccl-costmodel.md §8.1), 0 with Skipped saying
// why when it cannot be known.
type LoggedDecision struct {
	Line    int    `json:"line"`
	Coll    string `json:"coll"`
	Bytes   int64  `json:"bytes"`
	NBytes  int64  `json:"nbytes"`
	Algo    string `json:"algo"`
	Proto   string `json:"proto"`
	Count   int    `json:"count"`
	Skipped string `json:"skipped,omitempty"`
}

// overlayRoutes are the overlay endpoints, mounted by Handler.
func (s *Server) overlayRoutes() []route {
	return []route{
		{"POST", "/v1/overlay/sweep", s.overlaySweep, false},
		{"POST", "/v1/overlay/tuning", s.overlayTuning, false},
	}
}

// readUpload decodes an Upload strictly; the text must not be empty.
func readUpload(r *http.Request) (*Upload, error) {
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	var u Upload
	if ae := decodeJSON(bytesReader(body), &u); ae != nil {
		return nil, ae
	}
	if strings.TrimSpace(u.Text) == "" {
		return nil, badRequest("text", "text is empty: give the file's contents")
	}
	if u.Name == "" {
		u.Name = "upload"
	}
	if len(u.Name) > 256 || strings.ContainsAny(u.Name, "\x00\n\r") {
		return nil, badRequest("name", "name: at most 256 characters on one line")
	}
	return &u, nil
}

func problems(ps []calibrate.Problem) []UploadProblem {
	out := []UploadProblem{}
	for _, p := range ps {
		out = append(out, UploadProblem{Line: p.Line, Msg: p.Msg})
	}
	return out
}

func (s *Server) overlaySweep(w http.ResponseWriter, r *http.Request) error {
	u, err := readUpload(r)
	if err != nil {
		return err
	}
	sweeps, err := calibrate.ParseSweeps(u.Name, strings.NewReader(u.Text))
	if err != nil {
		return badRequest("text", "%v", err)
	}
	out := Measured{File: u.Name, Runs: []MeasuredRun{}, Problems: []UploadProblem{}}
	for _, sw := range sweeps {
		run := MeasuredRun{Line: sw.Line, Dtype: sw.Dtype, Op: sw.Op, Nodes: sw.Nodes, GPUsPerNode: sw.GPUsPerNode,
			Ranks: sw.Ranks, GPU: sw.GPUName, Algo: sw.Pin.Algo, Proto: sw.Pin.Proto, Points: []MeasuredPoint{}}
		if sw.CollKnown {
			run.Coll = sw.Coll.String()
		}
		for _, row := range sw.Rows {
			run.Points = append(run.Points, MeasuredPoint{Line: row.Line, Bytes: row.Bytes, OOPUS: row.OOP.TimeUS,
				OOPValid: row.OOP.Valid, InPlaceUS: row.IP.TimeUS, InPlaceVal: row.IP.Valid})
		}
		out.Runs = append(out.Runs, run)
		out.Problems = append(out.Problems, problems(sw.Bad)...)
		out.Problems = append(out.Problems, problems(sw.Warnings)...)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) overlayTuning(w http.ResponseWriter, r *http.Request) error {
	u, err := readUpload(r)
	if err != nil {
		return err
	}
	lg, err := calibrate.ParseNCCLLog(u.Name, strings.NewReader(u.Text))
	if err != nil {
		return badRequest("text", "%v", err)
	}
	if len(lg.Decisions) == 0 {
		return badRequest("text", "%s: no TUNING decision lines (\"... Bytes -> Algo ...\"; run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING)", u.Name)
	}
	ranks := lg.Comm.NRanks
	if ranks == 0 {
		ranks = lg.Comm.InitRanks
	}
	out := Logged{File: u.Name, NCCLVersion: lg.Comm.NCCLVersion, Nodes: lg.Comm.NNodes, Ranks: ranks,
		Decisions: []LoggedDecision{}, Problems: problems(lg.Problems)}
	type key struct {
		coll         string
		bytes        int64
		algo, proto  string
		formatNoColl bool
	}
	idx := map[key]int{}
	for _, d := range lg.Decisions {
		ld := LoggedDecision{Line: d.Line, Coll: d.CollName, Bytes: d.Bytes, Algo: d.Algo.String(), Proto: d.Proto.String(), Count: 1}
		switch {
		case d.Format == calibrate.Format220:
			ld.Skipped = "the 2.20-2.22 line names no collective"
		case !d.CollKnown:
			ld.Skipped = fmt.Sprintf("%s is not a collective the model prices", d.CollName)
		case d.Coll == capabilities.AllGather || d.Coll == capabilities.ReduceScatter:
			ld.Coll = d.Coll.String()
			if ranks == 0 {
				ld.Skipped = "the log names no rank count, so the model size (bytes x ranks) is unknown"
			} else {
				ld.NBytes = d.Bytes * int64(ranks)
			}
		default:
			ld.Coll, ld.NBytes = d.Coll.String(), d.Bytes
		}
		k := key{ld.Coll, ld.Bytes, ld.Algo, ld.Proto, d.Format == calibrate.Format220}
		if i, ok := idx[k]; ok {
			out.Decisions[i].Count++
			continue
		}
		idx[k] = len(out.Decisions)
		out.Decisions = append(out.Decisions, ld)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
