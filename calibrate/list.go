package calibrate

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// Listing is what calibrate list shows of sweeps: every file read, each run in it with its facts
// and every row with both halves, and why any row, run or file is dropped.
type Listing struct {
	Files []ListedFile `json:"files"`
}

// ListedFile is one file of a Listing.
type ListedFile struct {
	File string `json:"file"`
	// Dropped is why the whole file is not read ("" when it is): unreadable, no table.
	Dropped string        `json:"dropped,omitempty"`
	Line    int           `json:"line,omitempty"` // the line Dropped names
	Sweeps  []ListedSweep `json:"sweeps"`
}

// ListedSweep is one run of a file.
type ListedSweep struct {
	Line       int    `json:"line"`
	Coll       string `json:"coll"` // "" when nothing names it
	CollSource string `json:"coll_source"`
	Program    string `json:"program"`
	Tool       string `json:"tool"`
	Layout     string `json:"layout"`
	// NCCLVersion is the release the run used (NCCL's version line, else nccl-tests' library code,
	// else the manifest); TestsVersion nccl-tests' or collbench's.
	NCCLVersion  string `json:"nccl_version"`
	TestsVersion string `json:"tests_version"`
	Algo         string `json:"algo"`  // NCCL_ALGO, "" free
	Proto        string `json:"proto"` // NCCL_PROTO, "" free
	PinSource    string `json:"pin_source"`
	Ranks        int    `json:"ranks"`
	Nodes        int    `json:"nodes"`
	GPUsPerNode  int    `json:"gpus_per_node"`
	GPU          string `json:"gpu"`
	Dtype        string `json:"dtype"`
	Op           string `json:"op"`
	// NotFitted is why no row of the run can be fitted whatever the node table ("" when rows can).
	NotFitted string      `json:"not_fitted,omitempty"`
	Rows      []ListedRow `json:"rows"`
	// Dropped are the lines that looked like rows and were not read as rows, with the reason.
	Dropped  []ListedLine `json:"dropped"`
	Warnings []ListedLine `json:"warnings"`
}

// ListedRow is one row with both halves; Problems says why a half (or the row) is not fitted.
type ListedRow struct {
	Line     int        `json:"line"`
	Bytes    int64      `json:"bytes"`
	Count    int64      `json:"count"`
	Type     string     `json:"type"`
	Redop    string     `json:"redop"`
	Root     int        `json:"root"`
	OOP      ListedHalf `json:"oop"`
	IP       ListedHalf `json:"ip"`
	Problems []string   `json:"problems"`
}

// ListedHalf is one half of a row as printed, and whether it can be fitted.
type ListedHalf struct {
	TimeUS float64 `json:"time_us"`
	AlgBW  float64 `json:"algbw"`
	BusBW  float64 `json:"busbw"`
	// Wrong is #wrong, -1 for N/A and in the 12-column layout, whose error column is ErrorAbs.
	Wrong    int64   `json:"wrong"`
	ErrorAbs float64 `json:"error_abs"`
	Valid    bool    `json:"valid"`
	// Absent is true for the in-place half of a row that printed the out-of-place half only.
	Absent bool `json:"absent,omitempty"`
}

// ListedLine is a line and what is said about it. File is set when the line is another file's
// (a manifest's); the line is then that file's.
type ListedLine struct {
	File string `json:"file,omitempty"`
	Line int    `json:"line"`
	Msg  string `json:"msg"`
}

// List reads sweeps as LoadSweeps does (a directory, a manifest or one sweep file, with the
// manifest's pins and facts applied) and lists them. The error is LoadSweeps'.
func List(path string) (*Listing, error) {
	ld, err := loadSweeps(path)
	if err != nil {
		return nil, err
	}
	byFile := map[string][]*Sweep{}
	for _, s := range ld.sweeps {
		byFile[s.File] = append(byFile[s.File], s)
	}
	out := &Listing{}
	for _, f := range ld.files {
		lf := ListedFile{File: f, Sweeps: []ListedSweep{}}
		if p, ok := ld.dropped[f]; ok {
			lf.Dropped, lf.Line = p.Msg, p.Line
		}
		for _, s := range byFile[f] {
			lf.Sweeps = append(lf.Sweeps, listSweep(s))
		}
		out.Files = append(out.Files, lf)
	}
	return out, nil
}

func listSweep(s *Sweep) ListedSweep {
	ls := ListedSweep{Line: s.Line, CollSource: s.CollSource, Program: s.Program, Tool: s.Tool, Layout: s.Layout,
		NCCLVersion: s.NCCLVersion, TestsVersion: s.TestsVersion, Algo: s.Pin.Algo, Proto: s.Pin.Proto,
		PinSource: s.Pin.Source, Ranks: s.Ranks, Nodes: s.Nodes, GPUsPerNode: s.GPUsPerNode, GPU: s.GPUName,
		Dtype: s.Dtype, Op: s.Op, Rows: []ListedRow{}, Dropped: []ListedLine{}, Warnings: []ListedLine{}}
	if s.CollKnown {
		ls.Coll = s.Coll.String()
	} else {
		ls.NotFitted = msgNoColl
		if s.Program != "" {
			ls.NotFitted = fmt.Sprintf("%s is not a collective the model prices", s.Program)
		}
	}
	rowAt := map[int]int{}
	for i, r := range s.Rows {
		rowAt[r.Line] = i
		ls.Rows = append(ls.Rows, ListedRow{Line: r.Line, Bytes: r.Bytes, Count: r.Count, Type: r.Type, Redop: r.Redop,
			Root: r.Root, OOP: listHalf(r.OOP), IP: listHalf(r.IP), Problems: []string{}})
		if r.OOPOnly {
			ls.Rows[len(ls.Rows)-1].IP = ListedHalf{Absent: true, Wrong: -1, ErrorAbs: -1}
		}
	}
	for _, p := range s.Bad {
		if i, ok := rowAt[p.Line]; ok && p.File == s.File {
			ls.Rows[i].Problems = append(ls.Rows[i].Problems, p.Msg)
			continue
		}
		ls.Dropped = append(ls.Dropped, ListedLine{Line: p.Line, Msg: p.Msg})
	}
	for _, p := range s.Warnings {
		l := ListedLine{Line: p.Line, Msg: p.Msg}
		if p.File != s.File {
			l.File = p.File // a manifest's line
		}
		ls.Warnings = append(ls.Warnings, l)
	}
	sort.SliceStable(ls.Dropped, func(i, j int) bool { return ls.Dropped[i].Line < ls.Dropped[j].Line })
	return ls
}

func listHalf(h Half) ListedHalf {
	return ListedHalf{TimeUS: h.TimeUS, AlgBW: h.AlgBW, BusBW: h.BusBW, Wrong: h.Wrong, ErrorAbs: h.ErrorAbs, Valid: h.Valid}
}

// WriteText prints the listing: per run its facts and a table of its rows (both halves; the last
// column says which halves can be fitted), then the dropped lines and the warnings, each with its
// file and line; a file dropped as a whole is one line.
func (l *Listing) WriteText(w io.Writer) error {
	for i, f := range l.Files {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if f.Dropped != "" {
			fmt.Fprintf(w, "%s:%d: file dropped: %s\n", f.File, f.Line, f.Dropped)
			continue
		}
		for j, s := range f.Sweeps {
			if j > 0 {
				fmt.Fprintln(w)
			}
			if err := s.writeText(w, f.File); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *ListedSweep) writeText(w io.Writer, file string) error {
	coll := s.Coll
	switch {
	case coll == "" && s.Program != "":
		coll = s.Program + " (not modelled)"
	case coll == "":
		coll = "collective unknown"
	case s.CollSource != CollFromProgram:
		coll += " (" + s.CollSource + ")"
	}
	pin := "free"
	if s.Algo != "" || s.Proto != "" {
		pin = fmt.Sprintf("NCCL_ALGO=%s NCCL_PROTO=%s (%s)", orStar(s.Algo), orStar(s.Proto), s.PinSource)
	}
	facts := []string{coll, "pin " + pin}
	if s.NCCLVersion != "" {
		facts = append(facts, "NCCL "+s.NCCLVersion)
	}
	if s.TestsVersion != "" {
		facts = append(facts, s.Tool+" "+s.TestsVersion)
	}
	if s.Ranks > 0 {
		facts = append(facts, fmt.Sprintf("%d ranks on %s", s.Ranks, plural(s.Nodes, "node")))
	}
	if s.GPU != "" {
		facts = append(facts, s.GPU)
	}
	facts = append(facts, "layout "+s.Layout)
	fmt.Fprintf(w, "%s:%d: %s\n", file, s.Line, strings.Join(facts, ", "))
	if s.NotFitted != "" {
		fmt.Fprintf(w, "  not fitted: %s\n", s.NotFitted)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	wrongHead := "#wrong"
	if s.Layout == Layout12Column {
		wrongHead = "error"
	}
	fmt.Fprintf(tw, "  line\tbytes\tcount\ttype\tredop\troot\toop us\talgbw\tbusbw\t%s\tip us\talgbw\tbusbw\t%s\tfitted\n", wrongHead, wrongHead)
	for _, r := range s.Rows {
		fitted := "oop ip"
		switch {
		case !r.OOP.Valid && !r.IP.Valid:
			fitted = "-"
		case !r.OOP.Valid:
			fitted = "ip"
		case !r.IP.Valid:
			fitted = "oop"
		}
		root := fmt.Sprint(r.Root)
		if s.Layout == Layout12Column {
			root = "-"
		}
		fmt.Fprintf(tw, "  %d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Line, r.Bytes, r.Count, r.Type, r.Redop, root,
			r.OOP.text(s.Layout), r.IP.text(s.Layout), fitted)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range s.Rows {
		for _, p := range r.Problems {
			fmt.Fprintf(w, "  %s:%d: %s\n", file, r.Line, p)
		}
	}
	for _, d := range s.Dropped {
		fmt.Fprintf(w, "  %s:%d: dropped: %s\n", file, d.Line, d.Msg)
	}
	for _, d := range s.Warnings {
		f := file
		if d.File != "" {
			f = d.File
		}
		if _, err := fmt.Fprintf(w, "  %s:%d: warning: %s\n", f, d.Line, d.Msg); err != nil {
			return err
		}
	}
	return nil
}

// text is a half's columns: time, algbw, busbw and #wrong (N/A) or the error column.
func (h ListedHalf) text(layout string) string {
	if h.Absent {
		return "-\t-\t-\t-"
	}
	wrong := "N/A"
	switch {
	case layout == Layout12Column && h.ErrorAbs >= 0:
		wrong = fmt.Sprintf("%g", h.ErrorAbs)
	case layout != Layout12Column && h.Wrong >= 0:
		wrong = fmt.Sprintf("%d", h.Wrong)
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s", num2(h.TimeUS), num2(h.AlgBW), num2(h.BusBW), wrong)
}

// num2 prints a printed value back: two decimals, as nccl-tests prints them, but in %g form where
// that would hide it (below 0.01 but not 0, or above 1e7).
func num2(v float64) string {
	if (v != 0 && v < 0.01) || v >= 1e7 {
		return fmt.Sprintf("%.3g", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// plural writes "1 node", "2 nodes".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func orStar(s string) string {
	if s == "" {
		return "*"
	}
	return s
}
