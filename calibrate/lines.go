package calibrate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// maxLineBytes bounds one physical line; a longer line is an error that names it.
const maxLineBytes = 1 << 20

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

// pendingPiece is the start of a logical line whose end has not arrived yet.
type pendingPiece struct {
	line int
	rank int
	text strings.Builder
}

// readLogLines reads r to the end and returns its logical lines and the number of physical lines.
//
// mpirun --tag-output prefixes every chunk it forwards, so one physical line may hold several
// prefixed pieces, and a piece that is not the last on its physical line had no newline yet: it is
// the start of a line that the same rank's next piece continues. Pieces are concatenated exactly
// (a chunk may end in the middle of a number). Text before the first prefix is a line of its own.
// srun --label's "N: " is removed from the start of each logical line.
func readLogLines(file string, r io.Reader) ([]logLine, int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxLineBytes)
	var (
		out     []logLine
		pending = map[string]*pendingPiece{}
		phys    int
	)
	emit := func(line, rank int, text string) {
		if m := srunRE.FindStringSubmatchIndex(text); m != nil {
			if rank < 0 {
				rank, _ = strconv.Atoi(text[m[2]:m[3]])
			}
			text = text[m[1]:]
		}
		out = append(out, logLine{line: line, text: text, rank: rank})
	}
	for sc.Scan() {
		phys++
		s := strings.TrimRight(sc.Text(), "\r")
		locs := tagRE.FindAllStringSubmatchIndex(s, -1)
		if locs == nil {
			emit(phys, -1, s)
			continue
		}
		if pre := s[:locs[0][0]]; strings.TrimSpace(pre) != "" {
			emit(phys, -1, pre)
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
				p = &pendingPiece{line: phys, rank: rank}
				pending[key] = p
			}
			p.text.WriteString(s[m[1]:end])
			if i == len(locs)-1 {
				emit(p.line, p.rank, p.text.String())
				delete(pending, key)
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, phys, Problem{File: file, Line: phys + 1, Msg: fmt.Sprintf("line longer than %d bytes", maxLineBytes)}
		}
		return nil, phys, fmt.Errorf("calibrate: %s: %w", file, err)
	}
	// Pieces still waiting at the end of the input: the run was cut off mid-line.
	rest := make([]*pendingPiece, 0, len(pending))
	for _, p := range pending {
		rest = append(rest, p)
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].line < rest[j].line })
	for _, p := range rest {
		emit(p.line, p.rank, p.text.String())
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].line < out[j].line })
	return out, phys, nil
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
