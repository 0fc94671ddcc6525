package bootstrap

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxHosts bounds what ExpandHostlist expands, so that a hostlist like "n[0-999999999]" is an
// error, not an allocation of gigabytes. Slurm's own limit on a job's nodes is far below it.
const MaxHosts = 1 << 20

// HostlistError is a malformed Slurm hostlist expression: Pos is the 0-based byte offset in List
// where the problem was found.
type HostlistError struct {
	List string
	Pos  int
	Msg  string
}

func (e *HostlistError) Error() string {
	return fmt.Sprintf("bootstrap: hostlist %q: position %d: %s", e.List, e.Pos, e.Msg)
}

// ExpandHostlist expands a Slurm hostlist expression (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST,
// scontrol show hostnames) into host names, in order, duplicates kept. The grammar, as Slurm
// writes these lists:
//
//	list  = item { "," item }
//	item  = text { "[" ranges "]" text }        (at least one character)
//	ranges = range { "," range }
//	range = digits [ "-" digits ]               (lo <= hi)
//
// A range's numbers are zero-padded to the width of its lower bound as written ("c[01-02]" is
// c01,c02; "n[8-10]" is n8,n9,n10; "n[001-100]" pads to three digits). Several bracket groups in
// one item expand as a cartesian product with the leftmost group varying slowest
// ("r[1-2]n[1-2]" is r1n1,r1n2,r2n1,r2n2), text after a bracket is kept ("c[01-02]-x" is
// c01-x,c02-x). Whitespace, an empty item, an unmatched or nested bracket, an empty range, a
// non-digit inside brackets or lo > hi is a *HostlistError naming the offset.
func ExpandHostlist(list string) ([]string, error) {
	p := hostlistParser{s: list}
	var hosts []string
	for {
		item, err := p.item()
		if err != nil {
			return nil, err
		}
		hosts, err = item.expand(hosts, list, p.i)
		if err != nil {
			return nil, err
		}
		if p.i == len(p.s) {
			return hosts, nil
		}
		p.i++ // the comma
		if p.i == len(p.s) {
			return nil, p.errorf("empty host name after the last comma")
		}
	}
}

// FirstHost returns the first host of a Slurm hostlist expression (see ExpandHostlist), which the
// whole list must parse to be.
func FirstHost(list string) (string, error) {
	hosts, err := ExpandHostlist(list)
	if err != nil {
		return "", err
	}
	return hosts[0], nil
}

type hostlistParser struct {
	s string
	i int
}

func (p *hostlistParser) errorf(format string, args ...any) error {
	return &HostlistError{List: p.s, Pos: p.i, Msg: fmt.Sprintf(format, args...)}
}

// segment is one piece of an item: literal text, or (when ranges is not nil) a bracket group.
type segment struct {
	text   string
	ranges []numRange
}

type numRange struct {
	lo, hi uint64
	width  int
}

type hostItem []segment

// item parses up to the next top-level comma or the end.
func (p *hostlistParser) item() (hostItem, error) {
	var it hostItem
	start := p.i
	var text strings.Builder
	for p.i < len(p.s) && p.s[p.i] != ',' {
		c := p.s[p.i]
		switch {
		case c == '[':
			if text.Len() > 0 {
				it = append(it, segment{text: text.String()})
				text.Reset()
			}
			ranges, err := p.bracket()
			if err != nil {
				return nil, err
			}
			it = append(it, segment{ranges: ranges})
			continue
		case c == ']':
			return nil, p.errorf("']' without '['")
		case c <= ' ' || c == 0x7f:
			return nil, p.errorf("control or space character %q in a host name", c)
		}
		text.WriteByte(c)
		p.i++
	}
	if p.i == start {
		return nil, p.errorf("empty host name")
	}
	if text.Len() > 0 {
		it = append(it, segment{text: text.String()})
	}
	return it, nil
}

// bracket parses "[" ranges "]" at p.i.
func (p *hostlistParser) bracket() ([]numRange, error) {
	open := p.i
	p.i++
	var ranges []numRange
	for {
		lo, loWidth, err := p.number()
		if err != nil {
			return nil, err
		}
		r := numRange{lo: lo, hi: lo, width: loWidth}
		if p.i < len(p.s) && p.s[p.i] == '-' {
			p.i++
			at := p.i
			hi, _, err := p.number()
			if err != nil {
				return nil, err
			}
			if hi < lo {
				p.i = at
				return nil, p.errorf("range %d-%d runs backwards", lo, hi)
			}
			r.hi = hi
		}
		ranges = append(ranges, r)
		if p.i == len(p.s) {
			p.i = open
			return nil, p.errorf("'[' without ']'")
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return ranges, nil
		case '[':
			return nil, p.errorf("nested '['")
		default:
			return nil, p.errorf("unexpected %q inside brackets (want a digit, '-', ',' or ']')", p.s[p.i])
		}
	}
}

// number parses decimal digits at p.i, returning the value and the number of digits written.
func (p *hostlistParser) number() (uint64, int, error) {
	start := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i == start {
		if p.i == len(p.s) {
			return 0, 0, p.errorf("'[' without ']'")
		}
		return 0, 0, p.errorf("want a number, found %q", p.s[p.i])
	}
	digits := p.s[start:p.i]
	v, err := strconv.ParseUint(digits, 10, 32)
	if err != nil {
		p.i = start
		return 0, 0, p.errorf("number %s too large", digits)
	}
	return v, p.i - start, nil
}

// expand appends the item's hosts to hosts, failing past MaxHosts (pos: where the item ends).
func (it hostItem) expand(hosts []string, list string, pos int) ([]string, error) {
	count := uint64(1)
	for _, seg := range it {
		if seg.ranges == nil {
			continue
		}
		var n uint64
		for _, r := range seg.ranges {
			n += r.hi - r.lo + 1
		}
		count *= n
		if count+uint64(len(hosts)) > MaxHosts {
			return nil, &HostlistError{List: list, Pos: pos, Msg: fmt.Sprintf("expands past %d hosts", MaxHosts)}
		}
	}
	names := []string{""}
	for _, seg := range it {
		if seg.ranges == nil {
			for i := range names {
				names[i] += seg.text
			}
			continue
		}
		next := make([]string, 0, len(names))
		for _, prefix := range names {
			for _, r := range seg.ranges {
				for v := r.lo; v <= r.hi; v++ {
					next = append(next, fmt.Sprintf("%s%0*d", prefix, r.width, v))
				}
			}
		}
		names = next
	}
	return append(hosts, names...), nil
}

// tasksPerNode expands a Slurm task-count list (SLURM_STEP_TASKS_PER_NODE, "2(x3),1" is 2,2,2,1).
func tasksPerNode(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		count, rep := part, "1"
		if c, r, ok := strings.Cut(part, "(x"); ok {
			if !strings.HasSuffix(r, ")") {
				return nil, fmt.Errorf("%q: want N or N(xM)", part)
			}
			count, rep = c, strings.TrimSuffix(r, ")")
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: task count %q is not a positive integer", part, count)
		}
		m, err := strconv.Atoi(rep)
		if err != nil || m < 1 || len(out)+m > MaxHosts {
			return nil, fmt.Errorf("%q: repeat count %q is not a positive integer up to %d", part, rep, MaxHosts)
		}
		for range m {
			out = append(out, n)
		}
	}
	return out, nil
}
