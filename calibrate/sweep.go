package calibrate

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/collplan/collplan/capabilities"
)

// Table layouts (Sweep.Layout).
const (
	LayoutCurrent   = "current"    // nccl-tests v2.19.6: 13 fields, 21 with -I, +2 with -S
	LayoutPre2196   = "pre-2.19.6" // same fields, older widths and float formats
	Layout12Column  = "12-column"  // before the root column: a float error column instead of #wrong
	toolNCCLTests   = "nccl-tests"
	toolCollbench   = "collbench"
	pinSourceFree   = "free"
	pinSourceFile   = "file"
	pinSourceManif  = "manifest"
	pinSourceMixed  = "manifest+file"
	testsVersion219 = "2.19.6"
)

// Where a sweep's collective came from (Sweep.CollSource).
const (
	CollFromProgram  = "program"
	CollInferred     = "inferred"
	CollFromManifest = "manifest"
)

// Bounds of a plausible row. nccl-tests and collbench print times with two decimals at most
// (%.2f below 100 us), so a positive time under 0.01 us was not printed by them; 1e9 us is 1000 s
// for one call. No GPU holds a buffer of 1 TiB.
const (
	MinTimeUS = 0.01
	MaxTimeUS = 1e9
	MaxBytes  = int64(1) << 40
	// ConflictRatio is how far apart (max/min) two times of one size in one run may be before
	// neither is believed: repeated measurements differ by noise, not by this factor.
	ConflictRatio = 2.0
)

// Half is one half of a table row: out-of-place or in-place.
type Half struct {
	TimeUS float64 // µs per op (CPU time when Sweep.CPUTime)
	AlgBW  float64 // GB/s, printed size / time
	BusBW  float64 // GB/s, algbw × the collective's bus factor
	// Wrong is the #wrong column: the number of wrong elements; -1 when N/A (-c 0, or the in-place
	// half of sendrecv/alltoall) and in the 12-column layout, which has no such column.
	Wrong int64
	// ErrorAbs is the 12-column layout's error column (max absolute error); -1 when N/A; 0 in the
	// other layouts.
	ErrorAbs float64
	// Per-iteration statistics of -I (µs, and the coefficient of variation in %); 0 without -I.
	IterMinUS, IterMaxUS, IterP99US, IterCVPct float64
	// Valid is false when the half must not be fitted: #wrong > 0, an error column over nccl-tests'
	// tolerance for the type (or flagged with '*'), or a time that is not positive. Sweep.Bad names
	// every such half.
	Valid bool
}

// Row is one data row of an nccl-tests (or collbench) table.
type Row struct {
	Line int // line in the file where the row starts
	// Bytes is the size column as printed. For AllGather and ReduceScatter that is the full buffer
	// (per-rank count × element size × ranks), which is NCCL's model nBytes; for AllReduce,
	// Broadcast and Reduce it is count × element size.
	Bytes int64
	// Count is the count column: per rank for AllGather and ReduceScatter, the full count otherwise.
	Count int64
	Type  string // nccl-tests' type name as printed (float, half, bfloat16, ...)
	Redop string // as printed (sum, ..., none for AllGather and Broadcast)
	Root  int    // -1 for non-rooted collectives, and in the 12-column layout (no root column)
	OOP   Half   // out-of-place
	IP    Half   // in-place
	// OOPOnly is true for a row that printed the out-of-place half only (a fork of nccl-tests that
	// skips the in-place run, 8 fields in the 12-column layout, 9 with a root column): IP is zero
	// and not Valid.
	OOPOnly bool
	Stamp   string // -S timestamp as printed ("2025-06-11 10:00:00"), "" without -S
}

// Sweep is one nccl-tests (or collbench) run: its preamble facts, its rows and what was wrong.
type Sweep struct {
	File   string
	Line   int    // first line of this run in File (a file may hold several runs)
	Tool   string // "nccl-tests" or "collbench" from the preamble's version line; "" when absent
	Layout string // LayoutCurrent, LayoutPre2196 or Layout12Column

	Program   string            // "all_reduce_perf" from "# Collective test starting:"; "" when absent
	Coll      capabilities.Coll // the collective, when CollKnown
	CollKnown bool              // false for alltoall, sendrecv, ... and when nothing names the collective
	// CollSource says what named the collective: CollFromProgram (the "Collective test starting"
	// line), CollInferred (the columns and busbw/algbw, see inferColl), CollFromManifest, or "".
	CollSource string
	// Dtype and Op are the type and redop columns when every row agrees ("" when rows mix types,
	// as with -d all, or when there are no rows).
	Dtype, Op string

	NCCLVersion  string // "2.30.7": "NCCL version" INFO line, else nccl-tests' nccl-library code
	TestsVersion string // "2.19.6" from "# nccl-tests version"; collbench's version for collbench

	Ranks       int      // number of "# Rank" lines; 0 when the preamble has none
	Hosts       []string // distinct host names of the rank lines, in order of first appearance
	Nodes       int      // len(Hosts)
	GPUsPerNode int      // ranks per host when every host has the same number; 0 otherwise
	// ShapeSource says where Nodes and GPUsPerNode come from: ShapeFromRankLines, ShapeFromManifest
	// (the file's rank lines did not give them), or "" when nothing gave the ranks per node.
	ShapeSource string
	GPUName     string // rank 0's device name ("NVIDIA H100 80GB HBM3")

	// From the "# nThread ..." line; 0 when absent. Exactly one of StepFactor (-f) and StepBytes
	// (-i, additive) is set.
	NThreads, NGPUs       int
	MinBytes, MaxBytes    int64
	StepFactor, StepBytes int64
	WarmupIters, Iters    int
	Check                 int // validation iterations (-c); -1 when absent

	PerIter    bool // -I columns present
	Timestamps bool // -S timestamps present
	CPUTime    bool // -C: the time columns are CPU time

	Pin  Pin
	Rows []Row
	// Bad names every row or half that must not be fitted: #wrong > 0, errors over tolerance, rows
	// that do not parse, sizes inconsistent with their count.
	Bad []Problem
	// Warnings are file-level remarks: a FAILED footer, a missing footer (truncated run), test
	// failure messages, conflicting NCCL_ALGO/NCCL_PROTO lines, several runs in one file.
	Warnings []Problem

	Failed        bool    // "# Out of bounds values : N FAILED"
	OutOfBounds   int     // N of that footer line
	BWCheckFailed bool    // "# Avg bus bandwidth : X FAILED" (NCCL_TESTS_MIN_BW); the rows stay valid
	AvgBusBW      float64 // "# Avg bus bandwidth : X"; 0 when the footer is absent
	HasFooter     bool
}

// Pin says which algorithm and protocol a sweep was restricted to.
type Pin struct {
	// Algo and Proto are NCCL_ALGO and NCCL_PROTO as given ("Ring", "^LL128", "allreduce:tree");
	// "" means free choice.
	Algo, Proto string
	// Source is "manifest", "file", "manifest+file" (each value from a different source) or "free".
	Source string
	// AlgoSource and ProtoSource say where each value came from: "manifest", "file" or "free".
	AlgoSource, ProtoSource string
}

// IsFree reports whether neither algorithm nor protocol is pinned.
func (p Pin) IsFree() bool { return p.Algo == "" && p.Proto == "" }

func (p *Pin) fixSource() {
	if p.AlgoSource == "" {
		p.AlgoSource = pinSourceFree
	}
	if p.ProtoSource == "" {
		p.ProtoSource = pinSourceFree
	}
	switch {
	case p.AlgoSource == pinSourceFree && p.ProtoSource == pinSourceFree:
		p.Source = pinSourceFree
	case p.AlgoSource == p.ProtoSource || p.ProtoSource == pinSourceFree:
		p.Source = p.AlgoSource
	case p.AlgoSource == pinSourceFree:
		p.Source = p.ProtoSource
	default:
		p.Source = pinSourceMixed
	}
}

// ParseSweep reads one nccl-tests or collbench output and returns its first run. A file that holds
// several runs (several "# Collective test starting" preambles) gets a warning; ParseSweeps
// returns them all.
//
// The error is nil unless r fails, a line exceeds 1 MiB, or the input holds no table at all (no
// header and no row); those errors name file and line. Rows that fail are in Sweep.Bad.
func ParseSweep(file string, r io.Reader) (*Sweep, error) {
	sweeps, err := ParseSweeps(file, r)
	if err != nil {
		return nil, err
	}
	s := sweeps[0]
	if len(sweeps) > 1 {
		s.Warnings = append(s.Warnings, Problem{File: file, Line: sweeps[1].Line,
			Msg: fmt.Sprintf("the file holds %d runs; only the first is read here (use ParseSweeps)", len(sweeps))})
	}
	return s, nil
}

// ParseSweeps reads every run of an nccl-tests or collbench output (see ParseSweep). A new run
// starts at a version, "Collective test starting" or table header line once the current run has
// rows, a footer, or already has that line.
func ParseSweeps(file string, r io.Reader) ([]*Sweep, error) {
	lr := &logReader{file: file, r: r}
	p := &sweepParser{file: file, hosts: map[string]bool{}}
	p.start(1)
	for l := range lr.lines() {
		p.line(l)
	}
	if lr.err != nil {
		return nil, lr.err
	}
	p.dropPending()
	p.finish()
	var out []*Sweep
	var empty []*sweepState // section runs that printed nothing
	for _, st := range p.done {
		if len(st.s.Rows) == 0 && len(st.s.Bad) == 0 && st.sectionLine != 0 {
			empty = append(empty, st)
			continue
		}
		if st.sawHeader || len(st.s.Rows) > 0 || len(st.s.Bad) > 0 || st.s.Program != "" || st.s.TestsVersion != "" {
			out = append(out, st.s)
		}
	}
	// A section with no rows (a pinned run that failed or printed nothing) is not a run to fit; it
	// is said in the run before it, or the first one.
	for _, st := range empty {
		if len(out) == 0 {
			break
		}
		at := out[0]
		for _, s := range out {
			if s.Line < st.sectionLine {
				at = s
			}
		}
		at.Warnings = append(at.Warnings, Problem{File: file, Line: st.sectionLine,
			Msg: fmt.Sprintf("section %s has no rows: the run printed none (not fitted)", st.s.Pin.Env())})
		for _, w := range st.s.Warnings { // what the empty run said (a failure message), but its own "no data rows"
			if w.Line != st.s.Line {
				at.Warnings = append(at.Warnings, w)
			}
		}
	}
	// A line with NUL bytes is a warning of the run it falls in.
	for _, pr := range lr.nul {
		for i := len(out) - 1; i >= 0; i-- {
			if out[i].Line <= pr.Line || i == 0 {
				out[i].Warnings = append(out[i].Warnings, pr)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, Problem{File: file, Line: max(lr.phys, 1), Msg: "no nccl-tests table (no header and no data row) in the file"}
	}
	return out, nil
}

// Env is the pin as NCCL's variables: "NCCL_ALGO=Ring NCCL_PROTO=LL", "NCCL_ALGO=Tree", "" when free.
func (p Pin) Env() string {
	var parts []string
	if p.Algo != "" {
		parts = append(parts, "NCCL_ALGO="+p.Algo)
	}
	if p.Proto != "" {
		parts = append(parts, "NCCL_PROTO="+p.Proto)
	}
	return strings.Join(parts, " ")
}

// sweepState is a run being read.
type sweepState struct {
	s          *Sweep
	sawHeader  bool
	hdrLayout  string // layout the header implies, "" before a header
	hdrFields  int    // fields a row should have (12, 13 or 21), 0 when unknown
	concluded  bool
	rankSeen   map[int]bool
	hostRanks  map[string]int
	rank0Name  string
	anyName    string
	mixedNames bool
	libVersion string // from nccl-headers/nccl-library
	logVersion string // from the NCCL version INFO line
	rowN       int    // fields of the first parsed row (without the timestamp), 0 before it
	algoLine   int    // line of the first NCCL_ALGO pin, 0 when none
	// sectionLine is the line of the section line ("### ALGO=Ring") that began this run, 0 when none
	sectionLine int
	protoLine   int
}

type sweepParser struct {
	file string
	cur  *sweepState
	done []*sweepState
	// hosts are the host names of NCCL lines that start a line and of the rank lines: a row piece
	// that NCCL's prefix follows without a space ("-1" then "host:pid:tid") is cut off by them.
	hosts map[string]bool
	pend  *pendingRow
}

// pendingRow is a table row that NCCL log lines cut: nccl-tests prints a row in pieces (the size
// columns, then each half's columns after its timed loop), and NCCL's per-call lines
// (NCCL_DEBUG_SUBSYS=TUNING or COLL) land between them, each piece ending where a log line starts.
type pendingRow struct {
	line  int    // the line of the row's first piece
	first string // that line as printed, for the message when the row never completes
	text  string // the pieces so far, space-joined
}

func (p *sweepParser) start(line int) {
	p.cur = &sweepState{
		s:         &Sweep{File: p.file, Line: line, Check: -1, Pin: Pin{Source: pinSourceFree}},
		rankSeen:  map[int]bool{},
		hostRanks: map[string]int{},
	}
	p.done = append(p.done, p.cur)
}

// begun reports whether the current run has produced table output already.
func (st *sweepState) begun() bool {
	return len(st.s.Rows) > 0 || len(st.s.Bad) > 0 || st.s.HasFooter || st.concluded
}

func (st *sweepState) warn(line int, format string, args ...any) {
	st.s.Warnings = append(st.s.Warnings, Problem{File: st.s.File, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (st *sweepState) bad(line int, format string, args ...any) {
	st.s.Bad = append(st.s.Bad, Problem{File: st.s.File, Line: line, Msg: fmt.Sprintf(format, args...)})
}

var (
	versionRE  = regexp.MustCompile(`^#\s*(nccl-tests|collbench)\s+version\s+(\S+)(.*)$`)
	libCodeRE  = regexp.MustCompile(`nccl-library=(\d+)`)
	hdrCodeRE  = regexp.MustCompile(`nccl-headers=(\d+)`)
	startRE    = regexp.MustCompile(`^#\s*Collective test starting:\s*(\S+)`)
	concludeRE = regexp.MustCompile(`^#\s*Collective test concluded:`)
	rankRE     = regexp.MustCompile(`^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)$`)
	oobRE      = regexp.MustCompile(`^#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?`)
	avgRE      = regexp.MustCompile(`^#\s*Avg bus bandwidth\s*:\s*(\S+)\s*(OK|FAILED)?`)
	pinHashRE  = regexp.MustCompile(`^#\s*(NCCL_ALGO|NCCL_PROTO)\s*=\s*(.*?)\s*$`)
	pinEnvRE   = regexp.MustCompile(`^(NCCL_ALGO|NCCL_PROTO) set by environment to (.*?)\s*$`)
	ncclVerRE  = regexp.MustCompile(`^NCCL version (\d+\.\d+\.\d+)`)
	dateRE     = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
	clockRE    = regexp.MustCompile(`^\d{2}:\d{2}:\d{2}(\.\d+)?$`)
	failureRE  = regexp.MustCompile(`Test (NCCL |CUDA )?failure|Test timeout|NCCL error|Segmentation fault|Aborted`)
	paramsRE   = regexp.MustCompile(`^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)\s+step:\s*(\d+)\((factor|bytes)\)\s+warmup iters:\s*(\d+)\s+iters:\s*(\d+)(?:.*?validation:\s*(\d+))?`)
)

func (p *sweepParser) line(l logLine) {
	text := strings.TrimSpace(l.text)
	if text == "" {
		return
	}
	if nl, ok := parseNCCLLine(text); ok {
		nl = p.unglue(text, nl)
		if lead := strings.TrimSpace(text[:nl.start]); lead != "" {
			p.piece(l.line, text, lead)
		} else if nl.host != "" {
			p.hosts[nl.host] = true
		}
		p.ncclLine(l.line, nl)
		return
	}
	if p.pend != nil {
		// The row's last piece is a line of its own; anything else means the row never completed.
		joined := p.pend.text + " " + text
		if f := strings.Fields(joined); !strings.HasPrefix(text, "#") && rowComplete(f, p.rowWidth()) {
			line := p.pend.line
			p.pend = nil
			p.row(line, joined, f)
			return
		}
		p.dropPending()
	}
	if strings.HasPrefix(text, "#") {
		p.hashLine(l.line, text)
		return
	}
	fields := strings.Fields(text)
	// A line that starts with an integer is a row; so is one of a row's length that starts with
	// another number (a fractional or out-of-range size), which row rejects by name.
	if _, err := strconv.ParseInt(fields[0], 10, 64); err != nil && !(isNumber(fields[0]) && len(fields) >= 12) {
		if failureRE.MatchString(text) {
			p.cur.warn(l.line, "the run reports a failure: %s", clip(text))
		}
		return // other program output
	}
	p.row(l.line, text, fields)
}

// unglue moves the start of an NCCL line that follows a row piece without a space ("sum -1" then
// "38dcf168f605:1417:1417 [0] NCCL INFO ...", read as host "-138dcf168f605") to the known host name
// its prefix ends with, giving the piece back its last characters.
func (p *sweepParser) unglue(text string, nl ncclLine) ncclLine {
	if nl.host == "" || p.hosts[nl.host] || nl.start == 0 {
		return nl
	}
	best := ""
	for h := range p.hosts { // the longest known name the glued one ends with
		if len(h) < len(nl.host) && len(h) > len(best) && strings.HasSuffix(nl.host, h) {
			best = h
		}
	}
	if best != "" && text[nl.start:nl.start+len(nl.host)] == nl.host {
		nl.start += len(nl.host) - len(best)
		nl.host = best
	}
	return nl
}

// piece reads the text before an NCCL line on the same line: the first piece of a row (it starts
// with the size), or the next piece of the row in progress; a row is read once its pieces have
// the table's width. Other text before an NCCL line (a timestamp, a launcher's words) is ignored.
func (p *sweepParser) piece(line int, text, lead string) {
	if p.pend == nil {
		f := strings.Fields(lead)
		if _, err := strconv.ParseInt(f[0], 10, 64); err != nil {
			return
		}
		p.pend = &pendingRow{line: line, first: text, text: lead}
	} else {
		p.pend.text += " " + lead
	}
	f := strings.Fields(p.pend.text)
	switch want := p.rowWidth(); {
	case rowComplete(f, want):
		pr := p.pend
		p.pend = nil
		p.row(pr.line, pr.text, f)
	case len(f) > want+2:
		p.dropPending()
	}
}

// rowWidth is the number of fields a row of the current run has (sweepState.width), else the
// current layout's 13.
func (p *sweepParser) rowWidth() int { return cmp.Or(p.cur.width(), 13) }

// width is the number of fields a row of the run has: its header's, else its first row's; 0 before
// either.
func (st *sweepState) width() int { return cmp.Or(st.hdrFields, st.rowN) }

// rowComplete reports whether f is a whole row of want fields, or of want fields and a -S
// timestamp.
func rowComplete(f []string, want int) bool {
	n := len(f)
	return n == want || (n == want+2 && dateRE.MatchString(f[n-2]) && clockRE.MatchString(f[n-1]))
}

// dropPending names a row that NCCL log lines cut and that never completed.
func (p *sweepParser) dropPending() {
	if p.pend == nil {
		return
	}
	p.cur.bad(p.pend.line, "a table row is garbled by an NCCL log line on the same line: %s", clip(p.pend.first))
	p.pend = nil
}

func (p *sweepParser) ncclLine(line int, nl ncclLine) {
	if nl.level == "WARN" {
		return
	}
	if m := ncclVerRE.FindStringSubmatch(nl.msg); m != nil {
		st := p.cur
		if st.logVersion == "" {
			st.logVersion = m[1]
		} else if st.logVersion != m[1] {
			p.cur.warn(line, "NCCL version %s differs from %s named earlier", m[1], st.logVersion)
		}
		return
	}
	if m := pinEnvRE.FindStringSubmatch(nl.msg); m != nil {
		p.pinLine(line, m[1], m[2])
	}
}

// pinLine records an NCCL_ALGO/NCCL_PROTO value read in the file: the first one wins; a different
// later value is a warning.
func (p *sweepParser) pinLine(line int, name, value string) {
	value = strings.TrimSpace(strings.Trim(value, `"'`))
	if value == "" {
		return // an empty variable is unset
	}
	pin := &p.cur.s.Pin
	dst, src, at := &pin.Algo, &pin.AlgoSource, &p.cur.algoLine
	check := func(v string) error { _, err := capabilities.ParseAlgoEnv(v); return err }
	if name == "NCCL_PROTO" {
		dst, src, at = &pin.Proto, &pin.ProtoSource, &p.cur.protoLine
		check = func(v string) error { _, err := capabilities.ParseProtoEnv(v); return err }
	}
	if *at != 0 {
		if !strings.EqualFold(*dst, value) {
			p.cur.warn(line, "%s=%s differs from %s=%s on line %d; keeping the first", name, value, name, *dst, *at)
		}
		return
	}
	if err := check(value); err != nil {
		p.cur.warn(line, "%v", err)
	}
	*dst, *src, *at = value, pinSourceFile, line
	pin.fixSource()
}

func (p *sweepParser) hashLine(line int, text string) {
	if pins, ok := sectionPins(text); ok {
		p.section(line, pins)
		return
	}
	st := p.cur
	switch {
	case versionRE.MatchString(text):
		m := versionRE.FindStringSubmatch(text)
		if st.begun() || st.s.TestsVersion != "" {
			p.start(line)
			st = p.cur
		}
		st.s.Tool, st.s.TestsVersion = m[1], m[2]
		if c := libCodeRE.FindStringSubmatch(m[3]); c != nil {
			st.libVersion = versionFromCode(c[1])
		} else if c := hdrCodeRE.FindStringSubmatch(m[3]); c != nil {
			st.libVersion = versionFromCode(c[1])
		}
	case startRE.MatchString(text):
		m := startRE.FindStringSubmatch(text)
		if st.begun() || st.s.Program != "" {
			p.start(line)
			st = p.cur
		}
		st.s.Program = m[1]
		if c, ok := collFromProgram(m[1]); ok {
			st.s.Coll, st.s.CollKnown, st.s.CollSource = c, true, CollFromProgram
		}
	case concludeRE.MatchString(text):
		st.concluded = true
	case paramsRE.MatchString(text):
		m := paramsRE.FindStringSubmatch(text)
		s := st.s
		s.NThreads, _ = strconv.Atoi(m[1])
		s.NGPUs, _ = strconv.Atoi(m[2])
		s.MinBytes, _ = strconv.ParseInt(m[3], 10, 64)
		s.MaxBytes, _ = strconv.ParseInt(m[4], 10, 64)
		step, _ := strconv.ParseInt(m[5], 10, 64)
		if m[6] == "factor" {
			s.StepFactor = step
		} else {
			s.StepBytes = step
		}
		s.WarmupIters, _ = strconv.Atoi(m[7])
		s.Iters, _ = strconv.Atoi(m[8])
		if m[9] != "" {
			s.Check, _ = strconv.Atoi(m[9])
		}
	case rankRE.MatchString(text):
		m := rankRE.FindStringSubmatch(text)
		rank, err := strconv.Atoi(m[1])
		if err != nil || st.rankSeen[rank] {
			if err == nil && st.begun() {
				p.start(line)
				p.hashLine(line, text)
			}
			return
		}
		st.rankSeen[rank] = true
		p.hosts[m[2]] = true
		if _, ok := st.hostRanks[m[2]]; !ok {
			st.s.Hosts = append(st.s.Hosts, m[2])
		}
		st.hostRanks[m[2]]++
		name := strings.TrimSpace(m[3])
		if rank == 0 {
			st.rank0Name = name
		}
		if st.anyName == "" {
			st.anyName = name
		} else if name != st.anyName {
			st.mixedNames = true
		}
	case oobRE.MatchString(text):
		m := oobRE.FindStringSubmatch(text)
		st.s.HasFooter = true
		st.s.OutOfBounds, _ = strconv.Atoi(m[1])
		if m[2] == "FAILED" || (m[2] == "" && st.s.OutOfBounds > 0) {
			st.s.Failed = true
			p.cur.warn(line, "footer: %d out-of-bounds values, FAILED", st.s.OutOfBounds)
		}
	case avgRE.MatchString(text):
		m := avgRE.FindStringSubmatch(text)
		st.s.HasFooter = true
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			p.cur.warn(line, "footer: average bus bandwidth %q is not a number", m[1])
		} else {
			st.s.AvgBusBW = v
		}
		if m[2] == "FAILED" {
			st.s.BWCheckFailed = true
			p.cur.warn(line, "footer: average bus bandwidth %s below NCCL_TESTS_MIN_BW, FAILED", m[1])
		}
	case pinHashRE.MatchString(text):
		m := pinHashRE.FindStringSubmatch(text)
		p.pinLine(line, m[1], m[2])
	default:
		p.headerLine(line, text)
	}
}

// sectionPins reads a '#' line as a section line, as scripts that loop over NCCL_ALGO or
// NCCL_PROTO echo before each run ("### ALGO=Ring size=268435456", "# NCCL_ALGO=Tree NCCL_PROTO=LL"):
// after the '#'s, only KEY=VALUE words, at least one of them ALGO, PROTO, NCCL_ALGO or NCCL_PROTO.
// It returns those as NCCL variable names and values, in the line's order.
func sectionPins(text string) ([][2]string, bool) {
	var pins [][2]string
	for _, w := range strings.Fields(strings.TrimLeft(text, "#")) {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return nil, false
		}
		switch k {
		case "ALGO", "NCCL_ALGO":
			pins = append(pins, [2]string{"NCCL_ALGO", v})
		case "PROTO", "NCCL_PROTO":
			pins = append(pins, [2]string{"NCCL_PROTO", v})
		}
	}
	return pins, len(pins) > 0
}

// section reads a section line. Once the current run has rows or a footer, the line starts a new
// run that keeps the file's preamble (tool and NCCL versions, program, rank lines, column header):
// a section names what changed between runs, not a new program. Its ALGO and PROTO words are the
// new run's NCCL_ALGO and NCCL_PROTO.
func (p *sweepParser) section(line int, pins [][2]string) {
	if prev := p.cur; prev.begun() {
		p.start(line)
		p.cur.inherit(prev)
	}
	if p.cur.sectionLine == 0 {
		p.cur.sectionLine = line
	}
	for _, pin := range pins {
		p.pinLine(line, pin[0], pin[1])
	}
}

// inherit copies the preamble facts of prev, the run before a section line, into st.
func (st *sweepState) inherit(prev *sweepState) {
	s, ps := st.s, prev.s
	s.Tool, s.TestsVersion = ps.Tool, ps.TestsVersion
	// A collective inferred from rows is inferred at the end (finish), for each run from its own.
	s.Program, s.Coll, s.CollKnown, s.CollSource = ps.Program, ps.Coll, ps.CollKnown, ps.CollSource
	s.Hosts = append([]string(nil), ps.Hosts...)
	s.PerIter, s.Timestamps, s.CPUTime = ps.PerIter, ps.Timestamps, ps.CPUTime
	for r := range prev.rankSeen {
		st.rankSeen[r] = true
	}
	for h, n := range prev.hostRanks {
		st.hostRanks[h] = n
	}
	st.rank0Name, st.anyName, st.mixedNames = prev.rank0Name, prev.anyName, prev.mixedNames
	st.libVersion, st.logVersion = prev.libVersion, prev.logVersion
	st.sawHeader, st.hdrLayout, st.hdrFields, st.rowN = prev.sawHeader, prev.hdrLayout, prev.hdrFields, prev.rowN
}

// headerLine reads the column header ("# size count type redop root time ...").
func (p *sweepParser) headerLine(line int, text string) {
	words := strings.Fields(strings.TrimPrefix(text, "#"))
	has := func(w string) bool {
		for _, x := range words {
			if x == w {
				return true
			}
		}
		return false
	}
	if !(has("size") && has("count") && has("type")) {
		return
	}
	st := p.cur
	if st.begun() || st.sawHeader {
		p.start(line)
		st = p.cur
	}
	st.sawHeader = true
	switch {
	case has("error") && !has("root"):
		st.hdrLayout, st.hdrFields = Layout12Column, 12
	case strings.Contains(text, "busbw #wrong"):
		st.hdrLayout, st.hdrFields = LayoutPre2196, 13
	default:
		st.hdrLayout, st.hdrFields = LayoutCurrent, 13
	}
	if has("i_min") {
		st.hdrFields = 21
		st.s.PerIter = true
	}
	if has("timestamp") {
		st.s.Timestamps = true
	}
	if has("cputime") {
		st.s.CPUTime = true
	}
}

// row parses a data line.
func (p *sweepParser) row(line int, text string, fields []string) {
	st := p.cur
	if st.s.HasFooter || st.concluded {
		// Rows after a footer belong to a run whose preamble was lost.
		p.start(line)
		st = p.cur
	}
	r := Row{Line: line, Root: -1}
	n := len(fields)
	if n >= 2 && dateRE.MatchString(fields[n-2]) && clockRE.MatchString(fields[n-1]) {
		r.Stamp = fields[n-2] + " " + fields[n-1]
		fields = fields[:n-2]
		n -= 2
	}
	want := st.width()
	// A run whose rows print one half, the out-of-place one: 4 fields fewer than its header's. The
	// first row decides; a short row among whole ones is a row cut off.
	oopOnly := (n == 8 || n == 9) && (st.rowN == n || (st.rowN == 0 && (st.hdrFields == 0 || n == st.hdrFields-4)))
	if n != 12 && n != 13 && n != 21 && !oopOnly {
		if (n == 8 || n == 9) && want != 0 {
			p.cur.bad(line, "row has %d fields but the table has %d (a row cut off?): %s", n, want, clip(text))
			return
		}
		p.cur.bad(line, "unparsable row (%d fields; want 13, 21 with -I, or 12 in the old layout, or 9 and 8 with the out-of-place half only): %s", n, clip(text))
		return
	}
	if want != 0 && n != want && !oopOnly {
		p.cur.bad(line, "row has %d fields but the table has %d: %s", n, want, clip(text))
		return
	}
	old := n == 12 || n == 8
	var err error
	if r.Bytes, err = parseCount(fields[0]); err != nil {
		if v, ferr := strconv.ParseFloat(fields[0], 64); ferr == nil && v >= 0 && v != math.Trunc(v) {
			p.cur.bad(line, "size %q is not a whole number of bytes: %s", fields[0], clip(text))
		} else {
			p.cur.bad(line, "size %q: %v", fields[0], err)
		}
		return
	}
	if r.Bytes > MaxBytes {
		p.cur.bad(line, "size %d B is over %d B (1 TiB), more than a GPU holds: %s", r.Bytes, MaxBytes, clip(text))
		return
	}
	if r.Count, err = parseCount(fields[1]); err != nil {
		p.cur.bad(line, "count %q: %v", fields[1], err)
		return
	}
	r.Type, r.Redop = fields[2], fields[3]
	if isNumber(r.Type) || isNumber(r.Redop) {
		p.cur.bad(line, "unparsable row (type %q, redop %q): %s", r.Type, r.Redop, clip(text))
		return
	}
	rest := fields[4:]
	if !old {
		if r.Root, err = strconv.Atoi(fields[4]); err != nil {
			p.cur.bad(line, "root %q is not an integer: %s", fields[4], clip(text))
			return
		}
		rest = fields[5:]
	}
	per := len(rest) / 2
	halves := []*Half{&r.OOP, &r.IP}
	if oopOnly {
		per, halves, r.OOPOnly = len(rest), halves[:1], true
	}
	var flag [2]string
	for i, h := range halves {
		f := rest[i*per : (i+1)*per]
		if flag[i], err = parseHalf(h, f, old, r.Type); err != nil {
			p.cur.bad(line, "%s half: %v: %s", halfName(i), err, clip(text))
			return
		}
	}
	if msg := sizeCheck(st.s, r); msg != "" {
		p.cur.bad(line, "%s: %s", msg, clip(text))
		return
	}
	if flag[0] != "" || flag[1] != "" {
		var parts []string
		for i, f := range flag {
			if f != "" {
				parts = append(parts, halfName(i)+" "+f)
			}
		}
		p.cur.bad(line, "%d B %s %s: %s; not fitted", r.Bytes, r.Type, r.Redop, strings.Join(parts, ", "))
	}
	if r.Stamp != "" {
		st.s.Timestamps = true
	}
	if n == 21 {
		st.s.PerIter = true
	}
	if st.rowN == 0 {
		st.rowN = n
	}
	st.s.Rows = append(st.s.Rows, r)
}

func halfName(i int) string {
	if i == 0 {
		return "out-of-place"
	}
	return "in-place"
}

// parseHalf fills h from time, algbw, busbw, #wrong/error (and the four -I columns). It returns a
// non-empty flag when the half is parsed but must not be fitted.
func parseHalf(h *Half, f []string, old bool, typ string) (string, error) {
	vals := make([]float64, 0, 7)
	for i, s := range f {
		if i == 3 {
			continue
		}
		v, err := parseValue(s)
		if err != nil {
			return "", err
		}
		vals = append(vals, v)
	}
	h.TimeUS, h.AlgBW, h.BusBW = vals[0], vals[1], vals[2]
	if len(vals) == 7 {
		h.IterMinUS, h.IterMaxUS, h.IterP99US, h.IterCVPct = vals[3], vals[4], vals[5], vals[6]
	}
	h.Valid = true
	var flag string
	w := f[3]
	switch {
	case w == "N/A":
		h.Wrong = -1
		if old {
			h.ErrorAbs = -1
		}
	case old:
		h.Wrong = -1
		marked := strings.HasSuffix(w, "*")
		v, err := parseValue(strings.TrimSuffix(w, "*"))
		if err != nil {
			return "", fmt.Errorf("error column %q: %v", w, err)
		}
		h.ErrorAbs = v
		if tol := errorTolerance(typ); marked || v > tol {
			h.Valid = false
			flag = fmt.Sprintf("error %s over the tolerance %g of %s", w, tol, typ)
		}
	default:
		v, err := parseValue(w)
		if err != nil {
			return "", fmt.Errorf("#wrong %q: %v", w, err)
		}
		if v > math.MaxInt64/2 {
			return "", fmt.Errorf("#wrong %q: out of range", w)
		}
		h.Wrong = int64(math.Round(v))
		if h.Wrong > 0 {
			h.Valid = false
			flag = fmt.Sprintf("#wrong %s", w)
		}
	}
	switch {
	case h.TimeUS <= 0:
		h.Valid = false
		if flag == "" {
			flag = fmt.Sprintf("time %s µs", f[0])
		}
	case h.TimeUS < MinTimeUS || h.TimeUS > MaxTimeUS:
		h.Valid = false
		if flag == "" {
			flag = fmt.Sprintf("time %s µs is absurd (want %g..%g µs)", f[0], MinTimeUS, MaxTimeUS)
		}
	}
	return flag, nil
}

// errorTolerance is the largest error the old nccl-tests accepted for a type (its DeltaMaxValue):
// float reductions print small non-zero errors that are not failures.
func errorTolerance(typ string) float64 {
	switch strings.ToLower(typ) {
	case "half", "float16", "bfloat16":
		return 1e-2
	case "float", "float32":
		return 1e-5
	case "double", "float64":
		return 1e-12
	}
	return 0
}

// parseValue reads a non-negative finite number as nccl-tests prints it (%.2f, %.1e, %g ...).
func parseValue(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	return v, nil
}

func parseCount(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("out of range")
	}
	if err != nil {
		return 0, fmt.Errorf("not an integer")
	}
	if v < 0 {
		return 0, fmt.Errorf("negative")
	}
	return v, nil
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// eltSize is the element size of an nccl-tests type name, 0 when unknown.
func eltSize(typ string) int64 {
	switch strings.ToLower(typ) {
	case "char":
		return 1
	case "int":
		return 4
	}
	d, err := capabilities.ParseDtype(typ)
	if err != nil {
		return 0
	}
	return int64(d.Size())
}

// sizeCheck returns a message when size and count contradict each other: a row glued together from
// pieces of different lines, or a digit lost. AllReduce, Broadcast and Reduce print size =
// count × elt; AllGather and ReduceScatter print size = count × elt × ranks.
func sizeCheck(s *Sweep, r Row) string {
	elt := eltSize(r.Type)
	if elt == 0 || !s.CollKnown || r.Count > math.MaxInt64/elt/1024 {
		return ""
	}
	per := r.Count * elt
	switch s.Coll {
	case capabilities.AllGather, capabilities.ReduceScatter:
		if per == 0 || r.Bytes%per == 0 {
			return ""
		}
		return fmt.Sprintf("size %d is not a multiple of count %d × %d B", r.Bytes, r.Count, elt)
	default:
		if r.Bytes == per {
			return ""
		}
		return fmt.Sprintf("size %d is not count %d × %d B", r.Bytes, r.Count, elt)
	}
}

// collFromProgram maps "all_reduce_perf" (or "all_reduce", "AllReduce") to its collective.
func collFromProgram(prog string) (capabilities.Coll, bool) {
	name := prog
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	name = strings.TrimSuffix(name, "_mpi")
	name = strings.TrimSuffix(name, "_perf")
	c, err := capabilities.ParseColl(name)
	return c, err == nil
}

// versionFromCode turns NCCL_VERSION_CODE into "2.30.7": major*10000+minor*100+patch from 2.9 on,
// major*1000+minor*100+patch before.
func versionFromCode(s string) string {
	code, err := strconv.Atoi(s)
	if err != nil || code <= 0 {
		return ""
	}
	if code >= 10000 {
		return fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/1000, code%1000/100, code%100)
}

// versionLess compares dotted versions numerically ("2.9.1" < "2.19.6"); non-numeric parts count
// as 0.
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(pa), len(pb)); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(strings.TrimFunc(pa[i], func(r rune) bool { return r < '0' || r > '9' }))
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(strings.TrimFunc(pb[i], func(r rune) bool { return r < '0' || r > '9' }))
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// finish completes every run: layout, versions, rank facts, dtype and op, warnings.
func (p *sweepParser) finish() {
	for _, st := range p.done {
		s := st.s
		switch {
		case st.hdrLayout == Layout12Column || (st.hdrLayout == "" && st.rowN == 12):
			s.Layout = Layout12Column
		case st.hdrLayout == LayoutPre2196 || (s.Tool == toolNCCLTests && versionLess(s.TestsVersion, testsVersion219)):
			s.Layout = LayoutPre2196
		default:
			s.Layout = LayoutCurrent
		}
		switch {
		case st.logVersion != "":
			s.NCCLVersion = st.logVersion
			if st.libVersion != "" && st.libVersion != st.logVersion {
				st.warn(s.Line, "nccl-tests names NCCL %s but NCCL's log says %s", st.libVersion, st.logVersion)
			}
		default:
			s.NCCLVersion = st.libVersion
		}
		s.Ranks = len(st.rankSeen)
		s.Nodes = len(s.Hosts)
		if s.Nodes > 0 {
			per := s.Ranks / s.Nodes
			uniform := per*s.Nodes == s.Ranks
			for _, n := range st.hostRanks {
				uniform = uniform && n == per
			}
			if uniform {
				s.GPUsPerNode = per
				s.ShapeSource = ShapeFromRankLines
			}
		}
		s.GPUName = st.rank0Name
		if s.GPUName == "" {
			s.GPUName = st.anyName
		}
		if st.mixedNames {
			st.warn(s.Line, "ranks run on different GPU models; GPUName is rank 0's")
		}
		for i, r := range s.Rows {
			if i == 0 {
				s.Dtype, s.Op = r.Type, r.Redop
				continue
			}
			if r.Type != s.Dtype {
				s.Dtype = ""
			}
			if r.Redop != s.Op {
				s.Op = ""
			}
		}
		oopOnly, oopLine := 0, 0
		for _, r := range s.Rows {
			if r.OOPOnly {
				if oopOnly == 0 {
					oopLine = r.Line
				}
				oopOnly++
			}
		}
		if oopOnly > 0 {
			st.warn(oopLine, "%s with the out-of-place half only (no in-place columns): fit them with --half oop", plural(oopOnly, "row"))
		}
		if len(s.Rows) == 0 {
			st.warn(s.Line, "the run has no data rows")
		} else if !s.HasFooter {
			st.warn(s.Rows[len(s.Rows)-1].Line, "no footer after the last row: the run may have been cut off")
		}
		if (st.sawHeader || len(s.Rows) > 0) && !s.CollKnown && s.Program == "" {
			if c, why, ok := inferColl(s); ok {
				s.Coll, s.CollKnown, s.CollSource = c, true, CollInferred
				st.warn(s.Line, "%s: inferred %s from %s", msgNoColl, c, why)
				st.recheckSizes()
			} else {
				st.warn(s.Line, "%s, and %s", msgNoColl, why)
			}
		}
		st.conflicts()
		s.Pin.fixSource()
	}
}

// msgNoColl starts the warning for a run whose collective nothing names (a manifest's coll removes
// it).
const msgNoColl = "nothing names the collective (no \"# Collective test starting\" line)"

// recheckSizes drops the rows whose size contradicts their count for the collective inferred after
// they were read.
func (st *sweepState) recheckSizes() {
	s := st.s
	kept := s.Rows[:0]
	for _, r := range s.Rows {
		if msg := sizeCheck(s, r); msg != "" {
			st.bad(r.Line, "%s (%s inferred)", msg, s.Coll)
			continue
		}
		kept = append(kept, r)
	}
	s.Rows = kept
}

// conflicts marks the halves of rows that repeat a size (same type, op and root) with times more
// than ConflictRatio apart: neither time is fitted, and each row names the other's line.
func (st *sweepState) conflicts() {
	s := st.s
	type key struct {
		bytes      int64
		typ, redop string
		root       int
	}
	groups := map[key][]int{}
	var order []key
	for i, r := range s.Rows {
		k := key{r.Bytes, r.Type, r.Redop, r.Root}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	for _, k := range order {
		idx := groups[k]
		if len(idx) < 2 {
			continue
		}
		for h := 0; h < 2; h++ {
			half := func(i int) *Half {
				if h == 0 {
					return &s.Rows[i].OOP
				}
				return &s.Rows[i].IP
			}
			lo, hi := -1, -1
			for _, i := range idx {
				if !half(i).Valid {
					continue
				}
				if lo < 0 || half(i).TimeUS < half(lo).TimeUS {
					lo = i
				}
				if hi < 0 || half(i).TimeUS > half(hi).TimeUS {
					hi = i
				}
			}
			if lo < 0 || half(hi).TimeUS <= ConflictRatio*half(lo).TimeUS {
				continue
			}
			ratio := half(hi).TimeUS / half(lo).TimeUS
			for _, i := range idx {
				other := hi
				if i == hi {
					other = lo
				}
				if !half(i).Valid {
					continue
				}
				half(i).Valid = false
				st.bad(s.Rows[i].Line, "%d B %s %s measured again on line %d: %s time %g µs here, %g µs there (%.1fx apart); neither is fitted",
					k.bytes, k.typ, k.redop, s.Rows[other].Line, halfName(h), half(i).TimeUS, half(other).TimeUS, ratio)
			}
		}
	}
}

// ratioTol is how far busbw/algbw may be from a bus factor: rows with algbw >= 1 GB/s print it to
// better than 0.5 %.
const ratioTol = 0.01

// inferColl names a run's collective from its columns and bus factors (nccl-tests' busbw = algbw
// x factor; reference §15 item 10: AllReduce 2(n-1)/n, AllGather and ReduceScatter (n-1)/n,
// Broadcast and Reduce 1) when nothing else does. The columns: a root >= 0 is Broadcast (redop
// none) or Reduce; with root -1, bytes = elements x type size is AllReduce, and bytes = n x
// elements x type size (n >= 2, the per-rank count of AllGather and ReduceScatter) is AllGather
// (redop none) or ReduceScatter. busbw/algbw must then match the factor, at the rank count the
// "# Rank" lines give when they do, on every row whose algbw is at least 1 GB/s (smaller values
// print too few digits); without such a row nothing is inferred. The 12-column layout, which has
// no root column, allows rooted and unrooted collectives alike. The string says why (or why not).
func inferColl(s *Sweep) (capabilities.Coll, string, bool) {
	type cand struct {
		c capabilities.Coll
		n int // ranks the factor implies; 0 when it does not say (factor 1)
	}
	var (
		set        map[cand]bool
		rows       int
		redop      string
		root, mult int64 = -2, -2
		ratios     []float64
	)
	noRoot := s.Layout == Layout12Column
	for _, r := range s.Rows {
		h := r.OOP
		if !(h.Valid && h.AlgBW >= 1) {
			h = r.IP
		}
		elt := eltSize(r.Type)
		if !(h.Valid && h.AlgBW >= 1 && h.BusBW > 0) || elt == 0 || r.Count <= 0 || r.Bytes%(r.Count*elt) != 0 {
			continue
		}
		k := r.Bytes / (r.Count * elt)
		ratio := h.BusBW / h.AlgBW
		near := func(f float64) bool { return math.Abs(ratio-f) <= ratioTol*f }
		c := map[cand]bool{}
		rooted, unrooted := r.Root >= 0 || noRoot, r.Root < 0
		none := strings.EqualFold(r.Redop, "none")
		if rooted && k == 1 && near(1) {
			if none {
				c[cand{capabilities.Broadcast, 0}] = true
			} else {
				c[cand{capabilities.Reduce, 0}] = true
			}
		}
		if unrooted && k == 1 && !none && ratio < 2 {
			if n := int(math.Round(2 / (2 - ratio))); n >= 2 && near(2*float64(n-1)/float64(n)) {
				c[cand{capabilities.AllReduce, n}] = true
			}
		}
		if unrooted && k >= 2 && near(float64(k-1)/float64(k)) {
			if none {
				c[cand{capabilities.AllGather, int(k)}] = true
			} else {
				c[cand{capabilities.ReduceScatter, int(k)}] = true
			}
		}
		if set == nil {
			set = c
		} else {
			for x := range set {
				if !c[x] {
					delete(set, x)
				}
			}
		}
		rows++
		redop, root, mult = r.Redop, int64(r.Root), k
		ratios = append(ratios, ratio)
	}
	if rows == 0 {
		return 0, "no row has algbw >= 1 GB/s to read busbw/algbw from; give the manifest's coll", false
	}
	for x := range set {
		if s.Ranks > 0 && x.n != 0 && x.n != s.Ranks {
			delete(set, x)
		}
	}
	if len(set) != 1 {
		return 0, fmt.Sprintf("the columns and busbw/algbw (%.3f) of %d rows match no single collective; give the manifest's coll",
			median(ratios), rows), false
	}
	var x cand
	for k := range set {
		x = k
	}
	size := "bytes = elements x type size"
	if mult > 1 {
		size = fmt.Sprintf("bytes = %d x elements x type size", mult)
	}
	cols := fmt.Sprintf("root %d, redop %s, %s", root, redop, size)
	if noRoot {
		cols = fmt.Sprintf("redop %s, %s", redop, size)
	}
	factor := "1"
	switch x.c {
	case capabilities.AllReduce:
		factor = fmt.Sprintf("2(n-1)/n at n = %d", x.n)
	case capabilities.AllGather, capabilities.ReduceScatter:
		factor = fmt.Sprintf("(n-1)/n at n = %d", x.n)
	}
	return x.c, fmt.Sprintf("the columns (%s) and busbw/algbw %.3f = %s over %d rows", cols, median(ratios), factor, rows), true
}

// clip shortens a line for a message.
func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}
