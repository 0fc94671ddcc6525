package calibrate

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/collplan/collplan/internal/linescan"
)

// logLine is one logical line: launcher prefixes removed and the pieces of a split row joined.
type logLine struct {
	line int    // physical line (1-based) where the logical line starts
	text string // without launcher prefixes
	rank int    // the launcher's rank (mpirun tag or srun label), -1 when untagged
}

// tagRE matches mpirun --tag-output's prefix, "[jobid,rank]<stdout>:" (also stderr and stddiag).
var tagRE = regexp.MustCompile(`\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>:`)

// srunRE matches srun --label's prefix, "%*d: " at the start of a line.
var srunRE = regexp.MustCompile(`^\s*(\d+): `)

// hydraRankRE matches the "[N] " that MPICH's and Intel MPI's hydra mpiexec -prepend-rank (-l) put at
// the start of a line: a rank, not a timestamp. NCCL_DEBUG_TIMESTAMP_FORMAT's prefix is not
// digits alone (its default is "[%F %T] "), and an epoch-seconds format has more than 7 digits.
var hydraRankRE = regexp.MustCompile(`^\s*\[(\d{1,7})\] `)

// pendingPiece is the start of a logical line whose end has not arrived yet.
type pendingPiece struct {
	line int
	rank int
	text strings.Builder
	done bool // its line has been emitted
}

// logReader reads the logical lines of one input as a stream (lines), holding only the lines whose
// place in the order is not known yet. A physical line longer than linescan.MaxBytes is an error.
type logReader struct {
	file string
	r    io.Reader
	phys int   // physical lines read so far
	err  error // once lines has returned: the read error, or a Problem naming a line that is too long
	// nul names every physical line that held NUL bytes (a log zero-filled after a crash, a
	// corrupted copy): the text between the runs of NULs is read as separate lines.
	nul []Problem
}

// lines yields the logical lines of lr.r in the order of the physical line where each starts (in
// the order they end, among those that start on one line). It stops early when lr.r fails or a
// line is too long; lr.err says so after the loop.
//
// mpirun --tag-output prefixes every chunk it forwards, so one physical line may hold several
// prefixed pieces, and a piece that is not the last on its physical line had no newline yet: it is
// the start of a line that the same rank's next piece continues. Pieces are concatenated exactly
// (a chunk may end in the middle of a number). Text before the first prefix is a line of its own.
// srun --label's "N: " and hydra's -prepend-rank "[N] " are removed from the start of each logical
// line, and N is the line's rank. A physical line holding NUL bytes is read as the stretches of text
// between them (lr.nul names it). A line is yielded once no
// unfinished piece starts before it; the pieces still unfinished at the end follow, in order.
func (lr *logReader) lines() iter.Seq[logLine] {
	return func(yield func(logLine) bool) {
		var (
			held    []logLine                    // emitted, not yet yielded: sorted by line, stably
			pending = map[string]*pendingPiece{} // by tag
			open    []*pendingPiece              // pieces in order of their line; done ones are skipped
		)
		emit := func(line, rank int, text string) {
			for _, re := range []*regexp.Regexp{srunRE, hydraRankRE} {
				if m := re.FindStringSubmatchIndex(text); m != nil {
					if rank < 0 {
						rank, _ = strconv.Atoi(text[m[2]:m[3]])
					}
					text = text[m[1]:]
					break
				}
			}
			i := sort.Search(len(held), func(i int) bool { return held[i].line > line })
			held = slices.Insert(held, i, logLine{line: line, text: text, rank: rank})
		}
		// flush yields the held lines that no unfinished piece can come before (all, at the end);
		// false when the consumer has stopped.
		flush := func(all bool) bool {
			for len(open) > 0 && open[0].done {
				open = open[1:]
			}
			n := len(held)
			if len(open) > 0 && !all {
				first := open[0].line
				n = sort.Search(len(held), func(i int) bool { return held[i].line > first })
			}
			for _, l := range held[:n] {
				if !yield(l) {
					return false
				}
			}
			held = held[n:]
			return true
		}
		// piece reads the text of one physical line (or of one stretch of it between NUL bytes).
		piece := func(s string) {
			locs := tagRE.FindAllStringSubmatchIndex(s, -1)
			if locs == nil {
				emit(lr.phys, -1, s)
			} else {
				if pre := s[:locs[0][0]]; strings.TrimSpace(pre) != "" {
					emit(lr.phys, -1, pre)
				}
				for i, m := range locs {
					key := s[m[0]:m[1]]
					end := len(s)
					if i+1 < len(locs) {
						end = locs[i+1][0]
					}
					p := pending[key]
					if p == nil {
						rank, _ := strconv.Atoi(s[m[4]:m[5]])
						p = &pendingPiece{line: lr.phys, rank: rank}
						pending[key] = p
						open = append(open, p)
					}
					p.text.WriteString(s[m[1]:end])
					if i == len(locs)-1 {
						emit(p.line, p.rank, p.text.String())
						p.done = true
						delete(pending, key)
					}
				}
			}
		}
		sc := linescan.New(lr.file, lr.r)
		for sc.Scan() {
			lr.phys = sc.Line()
			s := strings.TrimRight(sc.Text(), "\r")
			if n := strings.Count(s, "\x00"); n > 0 {
				lr.nul = append(lr.nul, Problem{File: lr.file, Line: lr.phys,
					Msg: fmt.Sprintf("%d NUL bytes (a zero-filled or corrupted log); the text between them is read as separate lines", n)})
				for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == 0 }) {
					piece(part)
				}
			} else {
				piece(s)
			}
			if !flush(false) {
				return
			}
		}
		if err := sc.Err(); err != nil {
			var le *linescan.LongLineError
			if errors.As(err, &le) {
				lr.err = Problem{File: lr.file, Line: le.Line, Msg: fmt.Sprintf("line longer than %d bytes", le.Max)}
			} else {
				lr.err = fmt.Errorf("calibrate: %s: %w", lr.file, err)
			}
			return
		}
		// Pieces still waiting at the end of the input: the run was cut off mid-line.
		for _, p := range open {
			if !p.done {
				emit(p.line, p.rank, p.text.String())
			}
		}
		open = nil
		flush(true)
	}
}

// ncclLine is the message of an NCCL debug line and where it came from.
type ncclLine struct {
	level string // INFO, WARN, TRACE
	msg   string // the text after "NCCL INFO "
	host  string // "" when the prefix did not parse
	pid   int    // -1 when unknown
	dev   int    // the [N] of the prefix (NCCL prints the CUDA device); -1 when unknown
	start int    // index in the text where NCCL's prefix (or, without one, "NCCL LEVEL") starts
}

// ncclPrefixRE matches the end of NCCL's debug prefix, "host:pid:tid [dev] ", before "NCCL LEVEL".
var ncclPrefixRE = regexp.MustCompile(`(\S+):(\d+):(\d+) \[(\d+)\] $`)

// parseNCCLLine recognises "host:pid:tid [dev] NCCL INFO msg", with an optional "[timestamp] "
// (NCCL_DEBUG_TIMESTAMP_FORMAT) or any other text before it.
func parseNCCLLine(text string) (ncclLine, bool) {
	for _, level := range []string{"INFO", "WARN", "TRACE"} {
		tag := "NCCL " + level
		i := strings.Index(text, tag)
		for i >= 0 {
			j := i + len(tag)
			if (i == 0 || text[i-1] == ' ') && (j == len(text) || text[j] == ' ') {
				nl := ncclLine{level: level, msg: strings.TrimSpace(text[j:]), pid: -1, dev: -1, start: i}
				if m := ncclPrefixRE.FindStringSubmatchIndex(text[:i]); m != nil {
					nl.start = m[0]
					host := text[m[2]:m[3]]
					if k := strings.LastIndexByte(host, ']'); k >= 0 { // "[12:00:00]host" without a space
						host = host[k+1:]
						nl.start = m[2] + k + 1
					}
					nl.host = host
					nl.pid, _ = strconv.Atoi(text[m[4]:m[5]])
					nl.dev, _ = strconv.Atoi(text[m[8]:m[9]])
				}
				return nl, true
			}
			k := strings.Index(text[j:], tag)
			if k < 0 {
				break
			}
			i = j + k
		}
	}
	return ncclLine{}, false
}
