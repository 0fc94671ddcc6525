package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/internal/linescan"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/report"
)

// queryLine is one JSON-lines query; absent fields take the flags' defaults.
type queryLine struct {
	Coll    string          `json:"coll"`
	Bytes   json.RawMessage `json:"bytes"` // a number or a size string ("1MiB")
	Op      string          `json:"op"`
	Dtype   string          `json:"dtype"`
	PipeOps int             `json:"pipe_ops"`
	RegBuff bool            `json:"reg_buff"`
}

type answerJSON struct {
	Coll       string     `json:"coll"`
	Bytes      int64      `json:"bytes"`
	Op         string     `json:"op"`
	Dtype      string     `json:"dtype"`
	PipeOps    int        `json:"pipe_ops"`
	Algo       string     `json:"algo"`
	Proto      string     `json:"proto"`
	TimeUS     report.F32 `json:"time_us"`
	Channels   int        `json:"channels"`
	Threads    int        `json:"threads"`
	ChunkBytes int64      `json:"chunk_bytes"`
	SliceBytes int64      `json:"slice_bytes"`
	// Policy names what produced the row: the tuner's name when it answered for the row's class,
	// "builtin" when there is no tuner or it failed (then TunerNote says why).
	Policy    string `json:"policy"`
	TunerNote string `json:"tuner_note,omitempty"`
}

const csvHeader = "coll,bytes,op,dtype,pipe_ops,algo,proto,time_us,channels,threads,chunk_bytes,slice_bytes,policy"

// runQuery answers queries from stdin. A line starting with '{' is a JSON object (answered with
// a JSON line); any other non-blank, non-# line is CSV "coll,bytes[,op[,dtype[,pipe_ops]]]"
// (answered with a CSV row; a header line starting with "coll" is skipped). A bad line stops the
// run with an error naming its line number.
//
// The tuner is asked once per class. A tuner that fails for a class (it crashed, hung, answered
// garbage) does not stop the stream: that class's rows come from the built-in policy and say so in
// their policy column, stderr says why at the first such row, and the command exits with status 2
// at the end, since not every answer is the tuner's.
func runQuery(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	c := newCommand("query", stderr, false)
	server := c.fs.String("server", "", "send the queries to a running planner serve at this URL (http://127.0.0.1:7480) instead of planning here")
	tokenFile := c.fs.String("token-file", "", "with --server: file holding the service's bearer token")
	if err := parseFlags(c.fs, args); err != nil {
		return err
	}
	if *server != "" {
		return queryServer(ctx, c, *server, *tokenFile, stdin, stdout, stderr)
	}
	if *tokenFile != "" {
		return usagef("--token-file applies to --server")
	}
	s, _, pl, err := c.built()
	if err != nil {
		return err
	}
	if line := s.OverlayLine(pl); line != "" && len(pl.Overlay().Skipped) > 0 {
		fmt.Fprintf(stderr, "planner: query: overlay %s\n", line)
	}
	if s.Fabric != nil { // the rows carry no topology, so stderr names the fabric once
		fmt.Fprintf(stderr, "planner: query: fabric %s\n", report.FabricLine(s.Fabric, s.Topo.NNodes))
	}
	cf := &c.cf
	// One prepared class and DecisionTable per class: the tuner is asked once per class, not per line.
	type compiled struct {
		pr     *planner.Prepared
		dt     *planner.DecisionTable
		policy string
		note   string
	}
	var failed []string // "stdin:N: CLASS" of the classes the tuner failed for
	cache := map[planner.Class]compiled{}
	rw := newRowWriter(stdout)
	defer rw.w.Flush()
	err = scanQueries(stdin, cf, func(line int, isJSON bool, cls planner.Class, n int64) error {
		var err error
		c, ok := cache[cls]
		if !ok {
			if c.pr, err = pl.Prepare(ctx, cls); err != nil {
				return usagef("stdin:%d: %v", line, err)
			}
			if c.dt, err = c.pr.Compile(); err != nil {
				return usagef("stdin:%d: %v", line, err)
			}
			name, note := c.pr.Tuner()
			c.policy, c.note = name, note
			switch {
			case name == "":
				c.policy = report.BuiltinPolicy
			case c.pr.TunerErr() != nil:
				c.policy = report.BuiltinPolicy
				at := fmt.Sprintf("stdin:%d: %v %v %v, pipe ops %d", line, cls.Coll, cls.Dtype, cls.Op, cls.PipeOps)
				failed = append(failed, at)
				fmt.Fprintf(stderr, "planner: %s: tuner %s failed: %v; this class's rows come from the built-in policy (policy %q)\n",
					at, name, c.pr.TunerErr(), report.BuiltinPolicy)
			}
			cache[cls] = c
		}
		plan, err := c.pr.Explain(n)
		if err != nil {
			return usagef("stdin:%d: %v", line, err)
		}
		a := answerJSON{Coll: cls.Coll.String(), Bytes: n, Op: cls.Op.String(), Dtype: cls.Dtype.String(),
			PipeOps: cls.PipeOps, Algo: plan.Algo.String(), Proto: plan.Proto.String(), TimeUS: report.F32(plan.TimeUS),
			Channels: plan.Channels, Threads: plan.Threads, ChunkBytes: plan.ChunkBytes, SliceBytes: plan.SliceBytes,
			Policy: c.policy, TunerNote: c.note}
		if d := c.dt.Lookup(n); d != plan.Decision {
			return fmt.Errorf("stdin:%d: decision table and planner disagree at %d bytes (%v vs %v)", line, n, d, plan.Decision)
		}
		return rw.write(a, isJSON)
	})
	if err != nil {
		return err
	}
	if err := rw.cw.Error(); err != nil {
		return err
	}
	if len(failed) > 0 {
		return usagef("the tuner failed for %d classes (first at %s): their rows came from the built-in policy", len(failed), failed[0])
	}
	return nil
}

// rowWriter writes query's answers: a JSON line for a JSON query, a CSV row (after the header,
// once) for a CSV one.
type rowWriter struct {
	w          *bufio.Writer
	cw         *csv.Writer
	headerDone bool
}

func newRowWriter(stdout io.Writer) *rowWriter {
	w := bufio.NewWriter(stdout)
	return &rowWriter{w: w, cw: csv.NewWriter(w)}
}

func (rw *rowWriter) write(a answerJSON, isJSON bool) error {
	if isJSON {
		b, err := json.Marshal(a)
		if err != nil {
			return err
		}
		_, err = rw.w.Write(append(b, '\n'))
		return err
	}
	if !rw.headerDone {
		fmt.Fprintln(rw.w, csvHeader)
		rw.headerDone = true
	}
	t, _ := a.TimeUS.MarshalJSON()
	rw.cw.Write([]string{a.Coll, strconv.FormatInt(a.Bytes, 10), a.Op, a.Dtype, strconv.Itoa(a.PipeOps), a.Algo, a.Proto,
		string(t), strconv.Itoa(a.Channels), strconv.Itoa(a.Threads), strconv.FormatInt(a.ChunkBytes, 10),
		strconv.FormatInt(a.SliceBytes, 10), a.Policy})
	rw.cw.Flush()
	return rw.cw.Error()
}

// scanQueries reads planner query's stdin: one query per line, CSV or JSON, skipping blank lines,
// comments and a CSV header, and calls each with the line's number, its form and its class and
// size. A query that does not parse, or a line too long, is a usage error naming stdin's line.
func scanQueries(stdin io.Reader, cf *classFlags, each func(line int, isJSON bool, cls planner.Class, n int64) error) error {
	sc := linescan.New("stdin", stdin)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		isJSON := strings.HasPrefix(text, "{")
		var cls planner.Class
		var n int64
		var err error
		if isJSON {
			cls, n, err = parseJSONQuery(text, cf)
		} else {
			if strings.HasPrefix(strings.ToLower(text), "coll") {
				continue
			}
			cls, n, err = parseCSVQuery(text, cf)
		}
		if err != nil {
			return usagef("stdin:%d: %v", line, err)
		}
		if err := each(line, isJSON, cls, n); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		var le *linescan.LongLineError
		if errors.As(err, &le) {
			return usageError{err} // "stdin:N: line longer than ..."
		}
		return fmt.Errorf("stdin: %w", err)
	}
	return nil
}

func parseJSONQuery(text string, def *classFlags) (planner.Class, int64, error) {
	q := queryLine{Coll: def.coll, Op: def.op, Dtype: def.dtype, PipeOps: def.pipeOps, RegBuff: def.regBuff}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		return planner.Class{}, 0, fmt.Errorf("bad JSON query: %v", err)
	}
	if len(q.Bytes) == 0 {
		return planner.Class{}, 0, fmt.Errorf("bytes is required")
	}
	var sz string
	if q.Bytes[0] == '"' {
		if err := json.Unmarshal(q.Bytes, &sz); err != nil {
			return planner.Class{}, 0, fmt.Errorf("bytes: %v", err)
		}
	} else {
		sz = string(bytes.TrimSpace(q.Bytes))
	}
	n, err := bytesize.Parse(sz)
	if err != nil {
		return planner.Class{}, 0, err
	}
	cls, err := parseClass(q.Coll, q.Op, q.Dtype, q.PipeOps, q.RegBuff)
	return cls, n, err
}

func parseCSVQuery(text string, def *classFlags) (planner.Class, int64, error) {
	f, err := csv.NewReader(strings.NewReader(text)).Read()
	if err != nil {
		return planner.Class{}, 0, fmt.Errorf("bad CSV: %v", err)
	}
	if len(f) < 2 || len(f) > 5 {
		return planner.Class{}, 0, fmt.Errorf("want coll,bytes[,op[,dtype[,pipe_ops]]], got %d fields", len(f))
	}
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	n, err := bytesize.Parse(f[1])
	if err != nil {
		return planner.Class{}, 0, err
	}
	op, dtype, pipeOps := def.op, def.dtype, def.pipeOps
	if len(f) > 2 {
		op = f[2]
	}
	if len(f) > 3 {
		dtype = f[3]
	}
	if len(f) > 4 {
		if pipeOps, err = strconv.Atoi(f[4]); err != nil {
			return planner.Class{}, 0, fmt.Errorf("pipe_ops %q: not an integer", f[4])
		}
	}
	cls, err := parseClass(f[0], op, dtype, pipeOps, def.regBuff)
	return cls, n, err
}
