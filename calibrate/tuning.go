package calibrate

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/collplan/collplan/capabilities"
)

// TUNING decision line formats (Decision.Format), reference/nccl-costmodel.md §8.1.
const (
	Format224 = "2.24+"     // "AllReduce: 4096 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}"
	Format223 = "2.23"      // "AllReduce: 4096 Bytes -> Algo 1 proto 0 time 15.050000"
	Format220 = "2.20-2.22" // "4096 Bytes -> Algo 1 proto 0 time 15.050000" (no collective)
)

// Decision is one algorithm/protocol choice NCCL logged under NCCL_DEBUG_SUBSYS=TUNING.
type Decision struct {
	Line int
	// Coll is the collective when CollKnown. The 2.20-2.22 format names none, and names such as
	// SendRecv are not modelled collectives; CollName keeps what was printed ("" for 2.20-2.22).
	Coll      capabilities.Coll
	CollKnown bool
	CollName  string
	// Bytes is NCCL's count × element size, as printed: per-rank send bytes for AllGather,
	// per-rank receive bytes for ReduceScatter, the whole buffer for AllReduce. It is not the
	// model's nBytes, which is ×nRanks for AllGather and ReduceScatter (§8.1, §15 item 10).
	Bytes int64
	Algo  capabilities.Algo
	Proto capabilities.Proto
	// ChannelLo and ChannelHi are the 2.24+ channel{Lo..Hi} range; -1 in the older formats.
	ChannelLo, ChannelHi int
	// TimeUS is the predicted time of the older formats; -1 in the 2.24+ format.
	TimeUS float64
	Format string // Format224, Format223 or Format220
	// Host, PID and Dev come from NCCL's "host:pid:tid [dev]" prefix ("" and -1 when absent);
	// Rank is the launcher's rank (mpirun tag, srun label), -1 when untagged.
	Host      string
	PID, Dev  int
	Rank      int
	Timestamp string // "[...]" prefix of NCCL_DEBUG_TIMESTAMP_FORMAT, without brackets; "" when absent
}

// ModelTable is the latency/bandwidth table NCCL's rank 0 prints under TUNING at communicator init
// (reference/nccl-costmodel.md §7): lat_us/bw_gbps per collective × algorithm × protocol and the
// maximum threads per algorithm × protocol. Both NCCL's layouts are read: blocks of three algorithms
// ("Algorithm |" / "Protocol |" / "Max NThreads |" then one row per collective) and the older
// single block headed "Latency/AlgBw |".
type ModelTable struct {
	Line  int                 // first line of the table
	Algos []capabilities.Algo // algorithms the table has columns for, in printed order
	// LatUS and BwGBps are indexed [coll][algo][proto]; entries of algorithms not in Algos are 0.
	// BwGBps is NCCL's algorithm bandwidth (§15 item 1), 0 where NCCL disabled the cell.
	LatUS, BwGBps [capabilities.NumColls][capabilities.NumAlgos][capabilities.NumProtos]float64
	// MaxThreads is indexed [algo][proto].
	MaxThreads [capabilities.NumAlgos][capabilities.NumProtos]int
	// Incomplete is true when a block has fewer than five collective rows (a cut-off log); the
	// missing cells are 0.
	Incomplete bool
}

// Has reports whether the table has columns for algorithm a.
func (t *ModelTable) Has(a capabilities.Algo) bool {
	for _, x := range t.Algos {
		if x == a {
			return true
		}
	}
	return false
}

var (
	dec224RE = regexp.MustCompile(`^(\w+): (\d+) Bytes -> Algo (\w+) proto (\w+) channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}`)
	dec223RE = regexp.MustCompile(`^(\w+): (\d+) Bytes -> Algo (\d+) proto (\d+) time (\S+)`)
	dec220RE = regexp.MustCompile(`^(\d+) Bytes -> Algo (\d+) proto (\d+) time (\S+)`)
	stampRE  = regexp.MustCompile(`^\[([^\]]*)\]`)
	// taggedPathRE matches the symmetric-kernel and copy-engine lines, "AllReduce [Symmetric]: ...".
	taggedPathRE = regexp.MustCompile(`^\w+ \[[^\]]+\]: `)
)

// ParseTuning reads an NCCL log (any mix of NCCL output, nccl-tests tables and launcher prefixes)
// and returns its TUNING decisions, in file order, and the first model table (nil when there is
// none; later tables, from later communicators, are ignored).
//
// Lines that announce a decision (" Bytes -> Algo ") but match none of the three formats, and
// model-table rows that do not parse, are rejected: the error is then a Problems value naming each
// file and line, and the results still hold everything that parsed. Other errors come from r. The
// symmetric-kernel and copy-engine lines ("[Symmetric]: ... -> Kernel ...") are not algorithm
// decisions and are skipped.
func ParseTuning(file string, r io.Reader) ([]Decision, *ModelTable, error) {
	lr := &logReader{file: file, r: r}
	tr := newTuningReader(file)
	for l := range lr.lines() {
		nl, ok := parseNCCLLine(l.text)
		tr.line(l, nl, ok)
	}
	if lr.err != nil {
		return nil, nil, lr.err
	}
	tr.probs = append(tr.probs, lr.nul...)
	table := tr.finish()
	return tr.out, table, tr.probs.errOrNil()
}

// tuningReader reads the TUNING lines of one log, a line at a time (ParseTuning, ParseNCCLLog).
type tuningReader struct {
	file  string
	out   []Decision
	probs Problems
	tp    tableParser
}

func newTuningReader(file string) *tuningReader {
	return &tuningReader{file: file, tp: tableParser{file: file}}
}

// line reads one logical line; nl and ok are parseNCCLLine's.
func (tr *tuningReader) line(l logLine, nl ncclLine, ok bool) {
	if !ok || nl.level != "INFO" {
		return
	}
	if strings.Contains(nl.msg, " Bytes -> ") {
		d, perr := parseDecision(nl.msg)
		if perr != "" {
			if taggedPathRE.MatchString(nl.msg) {
				return // symmetric kernel and copy-engine paths
			}
			tr.probs = append(tr.probs, Problem{File: tr.file, Line: l.line, Msg: perr + ": " + clip(nl.msg)})
			return
		}
		d.Line, d.Host, d.PID, d.Dev, d.Rank = l.line, nl.host, nl.pid, nl.dev, l.rank
		if m := stampRE.FindStringSubmatch(strings.TrimSpace(l.text[:nl.start])); m != nil {
			d.Timestamp = m[1]
		}
		tr.out = append(tr.out, d)
		return
	}
	if p := tr.tp.line(l.line, nl.msg); p != nil {
		tr.probs = append(tr.probs, *p)
	}
}

// finish closes the last table block and returns the first model table (nil when none).
func (tr *tuningReader) finish() *ModelTable {
	tr.tp.endBlock()
	if len(tr.tp.tables) == 0 {
		return nil
	}
	table := tr.tp.tables[0]
	if table.Incomplete {
		tr.probs = append(tr.probs, Problem{File: tr.file, Line: table.Line,
			Msg: "the model table is incomplete (a block has fewer than five collective rows)"})
	}
	return table
}

// parseDecision reads the message of a decision line; the string is the reason it does not parse.
func parseDecision(msg string) (Decision, string) {
	d := Decision{ChannelLo: -1, ChannelHi: -1, TimeUS: -1, PID: -1, Dev: -1, Rank: -1}
	var (
		coll, bytes, algo, proto string
		numeric                  bool
	)
	switch {
	case dec224RE.MatchString(msg):
		m := dec224RE.FindStringSubmatch(msg)
		coll, bytes, algo, proto, d.Format = m[1], m[2], m[3], m[4], Format224
		lo, err1 := strconv.Atoi(m[5])
		hi, err2 := strconv.Atoi(m[6])
		if err1 != nil || err2 != nil || lo > hi {
			return d, fmt.Sprintf("channel range {%s..%s} is not a range", m[5], m[6])
		}
		d.ChannelLo, d.ChannelHi = lo, hi
	case dec223RE.MatchString(msg):
		m := dec223RE.FindStringSubmatch(msg)
		coll, bytes, algo, proto, d.Format, numeric = m[1], m[2], m[3], m[4], Format223, true
		t, err := strconv.ParseFloat(m[5], 64)
		if err != nil || math.IsNaN(t) || math.IsInf(t, 0) {
			return d, fmt.Sprintf("time %q is not a number", m[5])
		}
		d.TimeUS = t
	case dec220RE.MatchString(msg):
		m := dec220RE.FindStringSubmatch(msg)
		bytes, algo, proto, d.Format, numeric = m[1], m[2], m[3], Format220, true
		t, err := strconv.ParseFloat(m[4], 64)
		if err != nil || math.IsNaN(t) || math.IsInf(t, 0) {
			return d, fmt.Sprintf("time %q is not a number", m[4])
		}
		d.TimeUS = t
	default:
		return d, "TUNING line in none of the 2.20-2.22, 2.23 and 2.24+ formats"
	}
	n, err := strconv.ParseInt(bytes, 10, 64)
	if err != nil {
		return d, fmt.Sprintf("byte count %q out of range", bytes)
	}
	d.Bytes = n
	d.CollName = coll
	if coll != "" {
		if c, err := capabilities.ParseColl(coll); err == nil {
			d.Coll, d.CollKnown = c, true
		}
	}
	if numeric {
		a, err1 := strconv.Atoi(algo)
		p, err2 := strconv.Atoi(proto)
		if err1 != nil || a < 0 || a >= capabilities.NumAlgos {
			return d, fmt.Sprintf("algorithm id %s out of range 0..%d", algo, capabilities.NumAlgos-1)
		}
		if err2 != nil || p < 0 || p >= capabilities.NumProtos {
			return d, fmt.Sprintf("protocol id %s out of range 0..%d", proto, capabilities.NumProtos-1)
		}
		d.Algo, d.Proto = capabilities.Algo(a), capabilities.Proto(p)
		return d, ""
	}
	a, err := capabilities.ParseAlgo(algo)
	if err != nil {
		return d, fmt.Sprintf("unknown algorithm %q", algo)
	}
	p, err := capabilities.ParseProto(proto)
	if err != nil {
		return d, fmt.Sprintf("unknown protocol %q", proto)
	}
	d.Algo, d.Proto = a, p
	return d, ""
}

// tableParser follows the model table's blocks.
type tableParser struct {
	file   string
	tables []*ModelTable
	cur    *ModelTable
	// The current block: its columns, which header rows were seen, and how many collective rows.
	algos   []string
	cols    []tableCol
	protos  []string
	algoAt  int // line of the last Algorithm row
	state   int // 0 none, 1 after Algorithm, 2 after Protocol, 3 after Max NThreads (rows follow)
	rows    int
	inBlock bool
	skipped bool // the current table is a later one and is ignored
}

type tableCol struct {
	algo  capabilities.Algo
	proto capabilities.Proto
	ok    bool
}

func (tp *tableParser) problem(line int, format string, args ...any) *Problem {
	return &Problem{File: tp.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// cells splits "label | a | b |" into the label and the cells.
func cells(msg string) (string, []string) {
	parts := strings.Split(msg, "|")
	label := strings.TrimSpace(parts[0])
	rest := parts[1:]
	if n := len(rest); n > 0 && strings.TrimSpace(rest[n-1]) == "" {
		rest = rest[:n-1]
	}
	for i := range rest {
		rest[i] = strings.TrimSpace(rest[i])
	}
	return label, rest
}

// newBlock starts a block whose columns are cols; a block naming an algorithm the current table
// already has starts a new table.
func (tp *tableParser) newBlock(line int, cols []tableCol) {
	tp.endBlock()
	again := tp.cur == nil
	if tp.cur != nil {
		for _, c := range cols {
			if c.ok && tp.cur.Has(c.algo) {
				again = true
			}
		}
	}
	if again {
		tp.cur = &ModelTable{Line: line}
		tp.skipped = len(tp.tables) > 0
		if !tp.skipped {
			tp.tables = append(tp.tables, tp.cur)
		}
	}
	tp.cols, tp.rows, tp.inBlock = cols, 0, true
	for _, c := range cols {
		if c.ok && !tp.cur.Has(c.algo) {
			tp.cur.Algos = append(tp.cur.Algos, c.algo)
		}
	}
}

// endBlock closes the current block, marking its table short when rows are missing.
func (tp *tableParser) endBlock() {
	if tp.inBlock && tp.rows != capabilities.NumColls {
		tp.cur.Incomplete = true
	}
	tp.inBlock = false
}

// line reads one NCCL INFO message; it returns a problem when a table row does not parse.
func (tp *tableParser) line(line int, msg string) *Problem {
	if !strings.Contains(msg, "|") {
		return nil
	}
	label, cs := cells(msg)
	switch label {
	case "Algorithm":
		// "  Algorithm   |    (blank)   Tree   (blank) |" : one name per three protocol columns.
		tp.algos = append(tp.algos[:0], cs...)
		tp.state, tp.algoAt = 1, line
		return nil
	case "Protocol":
		if tp.state != 1 {
			return tp.problem(line, "model table: Protocol row without an Algorithm row")
		}
		tp.protos = append(tp.protos[:0], cs...)
		cols, bad := tp.blockCols()
		tp.newBlock(tp.algoAt, cols)
		tp.state = 2
		if bad != "" {
			return tp.problem(line, "model table: %s", bad)
		}
		return nil
	case "Latency/AlgBw":
		// The older single block: "Tree/    LL |" per column.
		var cols []tableCol
		var bad []string
		for _, c := range cs {
			a, p, ok := strings.Cut(c, "/")
			col := tableCol{}
			if ok {
				av, err1 := capabilities.ParseAlgo(strings.TrimSpace(a))
				pv, err2 := capabilities.ParseProto(strings.TrimSpace(p))
				col = tableCol{algo: av, proto: pv, ok: err1 == nil && err2 == nil}
			}
			if !col.ok {
				bad = append(bad, strconv.Quote(c))
			}
			cols = append(cols, col)
		}
		tp.newBlock(line, cols)
		tp.state = 2
		if len(bad) > 0 {
			return tp.problem(line, "model table: unknown columns %s (skipped)", strings.Join(bad, ", "))
		}
		return nil
	case "Max NThreads":
		if tp.state != 2 {
			return tp.problem(line, "model table: Max NThreads row without its header rows")
		}
		tp.state = 3
		if len(cs) != len(tp.cols) {
			return tp.problem(line, "model table: %d thread counts for %d columns", len(cs), len(tp.cols))
		}
		for i, c := range cs {
			n, err := strconv.Atoi(c)
			if err != nil || n < 0 {
				return tp.problem(line, "model table: thread count %q is not a count", c)
			}
			if col := tp.cols[i]; col.ok && !tp.skipped {
				tp.cur.MaxThreads[col.algo][col.proto] = n
			}
		}
		return nil
	}
	coll, err := capabilities.ParseColl(label)
	if err != nil || tp.state != 3 || !strings.Contains(msg, "/") {
		return nil // not a model-table row (e.g. the "Enabled NCCL Func/Proto/Algo Matrix")
	}
	if len(cs) != len(tp.cols) {
		return tp.problem(line, "model table: %s row has %d cells for %d columns", label, len(cs), len(tp.cols))
	}
	vals := make([][2]float64, len(cs))
	for i, c := range cs {
		ls, bs, ok := strings.Cut(c, "/")
		lat, err1 := strconv.ParseFloat(strings.TrimSpace(ls), 64)
		bw, err2 := strconv.ParseFloat(strings.TrimSpace(bs), 64)
		if !ok || err1 != nil || err2 != nil || math.IsInf(lat, 0) || math.IsInf(bw, 0) {
			return tp.problem(line, "model table: %s cell %q is not lat/bw", label, c)
		}
		vals[i] = [2]float64{lat, bw}
	}
	if !tp.skipped {
		for i, col := range tp.cols {
			if col.ok {
				tp.cur.LatUS[coll][col.algo][col.proto] = vals[i][0]
				tp.cur.BwGBps[coll][col.algo][col.proto] = vals[i][1]
			}
		}
	}
	tp.rows++
	if tp.rows == capabilities.NumColls {
		tp.endBlock()
		tp.state = 0
	}
	return nil
}

// blockCols builds the columns of a three-algorithm block from its Algorithm and Protocol rows. The
// Protocol row lists three protocols for each of three slots even when the block has fewer
// algorithms, so only the first len(algos)×3 names count.
func (tp *tableParser) blockCols() ([]tableCol, string) {
	var cols []tableCol
	var bad []string
	np := capabilities.NumProtos
	for i, name := range tp.algos {
		a, err := capabilities.ParseAlgo(name)
		if err != nil {
			bad = append(bad, strconv.Quote(name))
		}
		for j := 0; j < np; j++ {
			col := tableCol{algo: a, ok: err == nil}
			k := i*np + j
			if k >= len(tp.protos) {
				col.ok = false
			} else if p, perr := capabilities.ParseProto(tp.protos[k]); perr != nil {
				col.ok = false
				bad = append(bad, strconv.Quote(tp.protos[k]))
			} else {
				col.proto = p
			}
			cols = append(cols, col)
		}
	}
	if len(bad) > 0 {
		return cols, "unknown names " + strings.Join(bad, ", ") + " (columns skipped)"
	}
	return cols, ""
}
