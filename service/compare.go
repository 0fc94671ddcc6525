package service

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/report"
)

// CompareRequest is POST /v1/compare: planner compare's flags, with the sweeps uploaded. The
// topology and class fields are a Query's (coll, bytes and tuner do not apply: every measured
// collective and size is scored, under tuners A and B, names from the service's set or none);
// Sweeps maps file names (NAME.txt, .log or .out) to their nccl-tests or collbench text, pinned
// by their NCCL_ALGO/NCCL_PROTO lines (no manifest: a request names no file on the server).
type CompareRequest struct {
	Query
	A      string            `json:"a,omitempty"`
	B      string            `json:"b,omitempty"`
	Half   string            `json:"half,omitempty"`
	Sweeps map[string]string `json:"sweeps"`
}

// Compared is /v1/compare's answer: planner compare's stdout (Report) and its stderr lines
// (Notes: problems in the sweeps, sweeps skipped and why). Paths in both name the uploads as
// upload/NAME.
type Compared struct {
	Report     string   `json:"report"`
	Notes      []string `json:"notes"`
	Generation uint64   `json:"generation"`
}

// sweepName is an uploaded sweep's file name.
var sweepName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.(txt|log|out)$`)

// maxSweepFiles bounds the files of one comparison.
const maxSweepFiles = 256

func (s *Server) compare(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var req CompareRequest
	if ae := decodeJSON(bytesReader(body), &req); ae != nil {
		return ae
	}
	switch {
	case req.Coll != "":
		return badRequest("coll", "compare scores every collective the sweeps measure: coll does not apply")
	case len(req.Bytes) > 0:
		return badRequest("bytes", "compare scores every size the sweeps measure: bytes does not apply")
	case req.Tuner != "":
		return badRequest("tuner", "compare takes its tuners as a and b, not tuner")
	case len(req.Sweeps) == 0:
		return badRequest("sweeps", "sweeps is required: file name -> nccl-tests text")
	case len(req.Sweeps) > maxSweepFiles:
		return badRequest("sweeps", "%d sweep files: at most %d", len(req.Sweeps), maxSweepFiles)
	}
	for name := range req.Sweeps {
		if !sweepName.MatchString(name) {
			return badRequest("sweeps", "sweep file name %q: want NAME.txt, NAME.log or NAME.out (letters, digits, . _ -)", name)
		}
	}
	half, err := calibrate.ParseHalf(orDefault(req.Half, "ip"))
	if err != nil {
		return badRequest("half", "half %q: want oop or ip", req.Half)
	}
	st := s.acquire()
	defer st.release()
	req.Query.Bytes = nil
	res, ae := st.resolve(&req.Query, false)
	if ae != nil {
		return ae
	}
	var tuners [2]report.CompareTuner
	for i, name := range []string{req.A, req.B} {
		field := []string{"a", "b"}[i]
		name = orDefault(name, "none")
		var tc *plugin.Client
		if !strings.EqualFold(name, "none") {
			var ok bool
			if tc, ok = st.tuners[name]; !ok {
				return badRequest(field, "unknown tuner %q (the service has %s)", name, names(st.tuners))
			}
		}
		tuners[i] = report.CompareTuner{Name: name, Open: func() (*plugin.Client, error) { return tc, nil }}
	}
	setup, err := report.Build(res.spec, report.NoEnv)
	if err != nil {
		return specError(err)
	}
	dir, err := os.MkdirTemp("", "collplan-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	files := make([]string, 0, len(req.Sweeps))
	for name := range req.Sweeps {
		files = append(files, name)
	}
	slices.Sort(files)
	for _, name := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(req.Sweeps[name]), 0o600); err != nil {
			return err
		}
	}
	upload := func(s string) string { return strings.ReplaceAll(s, dir, "upload") }
	out := Compared{Notes: []string{}, Generation: st.gen}
	all, problems, err := calibrate.LoadSweeps(dir)
	if err != nil {
		return badRequest("sweeps", "%s", upload(err.Error()))
	}
	for _, p := range problems {
		out.Notes = append(out.Notes, upload(fmt.Sprint("planner: compare: ", p)))
	}
	if err := s.compiles.acquire(r.Context()); err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	err = report.Compare(r.Context(), setup, res.cls, tuners, "upload", all, half, &stdout, &stderr)
	s.compiles.release()
	if err != nil {
		return badRequest("", "%s", upload(err.Error()))
	}
	out.Report = upload(stdout.String())
	for _, l := range strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n") {
		if l != "" {
			out.Notes = append(out.Notes, upload(l))
		}
	}
	w.Header().Set("Collplan-Generation", strconv.FormatUint(st.gen, 10))
	writeJSON(w, http.StatusOK, out)
	return nil
}
