package configfile

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// DepthError is a TOML document nested deeper than its schema allows.
type DepthError struct {
	File  string // the file as named to CheckTOML or DecodeTOML
	Line  int    // 1-based line where the nesting first goes deeper than Max
	Depth int    // the depth reached there (Max+1: the scan stops at the first level too deep)
	Max   int    // the schema's deepest level
}

func (e *DepthError) Error() string {
	return fmt.Sprintf("%s: line %d: nesting depth %d exceeds the maximum of %d", e.File, e.Line, e.Depth, e.Max)
}

// nesting scans TOML text for the first place nested deeper than max. It returns ok, or the line
// and depth of that place. It parses only as much TOML as depth needs: strings (basic, literal and
// their multi-line forms, with escapes), comments, keys (bare, quoted and dotted), table headers,
// arrays and inline tables. Anything else is skipped as a scalar; where the text is not TOML the
// scan goes on counting brackets as arrays, so invalid text cannot hide nesting from it.
func nesting(src []byte, max int) (line, depth int, ok bool) {
	s := &depthScanner{src: src, line: 1, max: max, arrays: map[string]bool{}}
	s.document()
	if s.badDepth != 0 {
		return s.badLine, s.badDepth, false
	}
	return 0, 0, true
}

// depthScanner is the state of one nesting scan. Its recursion (value, array, inlineTable) is at
// most about 2(max+1) calls deep: value checks its level before it opens an array or a table.
type depthScanner struct {
	src  []byte
	pos  int
	line int
	max  int
	// arrays holds the paths of the [[array]] headers seen, their parts joined by NUL: a header
	// under one ([a.b] after [[a]]) is one level deeper than its parts alone.
	arrays map[string]bool
	// badDepth and badLine are the first level deeper than max and its line; 0 while there is none.
	badDepth, badLine int
}

// deeper records depth d when it is over max (as max+1: a long dotted key reaches further in one
// step) and reports whether the scan is to stop.
func (s *depthScanner) deeper(d int) bool {
	if d > s.max && s.badDepth == 0 {
		s.badDepth, s.badLine = s.max+1, s.line
	}
	return s.badDepth != 0
}

func (s *depthScanner) peek() byte {
	if s.pos < len(s.src) {
		return s.src[s.pos]
	}
	return 0
}

func (s *depthScanner) at(prefix string) bool { return bytes.HasPrefix(s.src[s.pos:], []byte(prefix)) }

func (s *depthScanner) skipBlanks() {
	for s.pos < len(s.src) && (s.src[s.pos] == ' ' || s.src[s.pos] == '\t') {
		s.pos++
	}
}

// comment skips from '#' to the end of the line, leaving the newline.
func (s *depthScanner) comment() {
	if i := bytes.IndexByte(s.src[s.pos:], '\n'); i >= 0 {
		s.pos += i
	} else {
		s.pos = len(s.src)
	}
}

// document scans the top level: table headers at the start of a line, key/value pairs under them.
func (s *depthScanner) document() {
	base := 0 // depth of the current table
	lineStart := true
	for s.badDepth == 0 && s.pos < len(s.src) {
		switch c := s.src[s.pos]; {
		case c == ' ' || c == '\t' || c == '\r':
			s.pos++
			continue
		case c == '\n':
			s.pos++
			s.line++
			lineStart = true
			continue
		case c == '#':
			s.comment()
		case c == '[' && lineStart:
			base = s.header()
		default:
			s.keyValue(base)
		}
		lineStart = false
	}
}

// header scans "[a.b]" or "[[a.b]]" and returns the depth of the table it opens.
func (s *depthScanner) header() int {
	s.pos++
	array := s.peek() == '['
	if array {
		s.pos++
	}
	parts, names := s.key(true)
	if parts == 0 { // not a header: count what follows as values of a top-level key
		s.value(1)
		return 0
	}
	if s.deeper(parts) {
		return 0
	}
	s.skipBlanks()
	if s.peek() == ']' {
		s.pos++
		if array && s.peek() == ']' {
			s.pos++
		}
	}
	d := parts
	for i := range names {
		p := strings.Join(names[:i+1], "\x00")
		if array && i == len(names)-1 {
			s.arrays[p] = true
		}
		if s.arrays[p] {
			d++ // the element of an array of tables is a level of its own
		}
	}
	s.deeper(d)
	return d
}

// key scans a bare, quoted or dotted key and returns its number of parts; with collect, also the
// parts (unquoted), up to max+1 of them.
func (s *depthScanner) key(collect bool) (parts int, names []string) {
	for {
		s.skipBlanks()
		start := s.pos
		switch s.peek() {
		case '"':
			s.basicString()
		case '\'':
			s.literalString()
		default:
			for s.pos < len(s.src) && !isKeyEnd(s.src[s.pos]) {
				s.pos++
			}
		}
		if s.pos == start {
			return parts, names
		}
		parts++
		if collect && len(names) <= s.max {
			name := string(s.src[start:s.pos])
			if q := name[0]; (q == '"' || q == '\'') && len(name) >= 2 && name[len(name)-1] == q {
				if u, err := strconv.Unquote(name); q == '"' && err == nil {
					name = u
				} else {
					name = name[1 : len(name)-1]
				}
			}
			names = append(names, name)
		}
		s.skipBlanks()
		if s.peek() != '.' {
			return parts, names
		}
		s.pos++
	}
}

// isKeyEnd reports whether c cannot be part of a bare key. Any other byte is taken as one, which is
// more than TOML's A-Za-z0-9_- and so never counts fewer parts.
func isKeyEnd(c byte) bool {
	switch c {
	case ' ', '\t', '\r', '\n', '=', '.', '#', '[', ']', '{', '}', ',', '"', '\'':
		return true
	}
	return false
}

// keyValue scans "key = value" in a table whose depth is base.
func (s *depthScanner) keyValue(base int) {
	parts, _ := s.key(false)
	if parts == 0 { // not a key: count what is here as a value one level down
		s.value(base + 1)
		return
	}
	d := base + parts
	if s.deeper(d) {
		return
	}
	s.skipBlanks()
	if s.peek() != '=' {
		return
	}
	s.pos++
	s.skipBlanks()
	s.value(d)
}

// value scans one value at depth d: a string, an array, an inline table or a scalar (a number, a
// boolean, a date and time: up to the next separator).
func (s *depthScanner) value(d int) {
	if s.deeper(d) || s.pos >= len(s.src) {
		return
	}
	switch s.src[s.pos] {
	case '"':
		s.basicString()
	case '\'':
		s.literalString()
	case '[':
		s.array(d + 1)
	case '{':
		s.inlineTable(d)
	case '\n', '#': // no value; the caller's loop takes the line's end
	default:
		start := s.pos
		for s.pos < len(s.src) && !isValueEnd(s.src[s.pos]) {
			s.pos++
		}
		if s.pos == start { // a stray ']', '}' or ','
			s.pos++
		}
	}
}

// isValueEnd reports whether c ends a scalar. Blanks do not: "1979-05-27 07:32:00" is one value.
func isValueEnd(c byte) bool {
	switch c {
	case '\r', '\n', '#', ',', '[', ']', '{', '}', '"', '\'':
		return true
	}
	return false
}

// array scans "[v, ...]" whose elements are at depth d.
func (s *depthScanner) array(d int) {
	s.pos++
	for s.badDepth == 0 && s.pos < len(s.src) {
		switch s.src[s.pos] {
		case ' ', '\t', '\r', ',':
			s.pos++
		case '\n':
			s.pos++
			s.line++
		case '#':
			s.comment()
		case ']':
			s.pos++
			return
		default:
			s.value(d)
		}
	}
}

// inlineTable scans "{k = v, ...}" that is at depth base: its keys add to base as a table's do.
// Newlines and comments are allowed in it (TOML 1.1).
func (s *depthScanner) inlineTable(base int) {
	s.pos++
	for s.badDepth == 0 && s.pos < len(s.src) {
		switch s.src[s.pos] {
		case ' ', '\t', '\r', ',':
			s.pos++
		case '\n':
			s.pos++
			s.line++
		case '#':
			s.comment()
		case '}':
			s.pos++
			return
		default:
			s.keyValue(base)
		}
	}
}

// basicString skips a "..." or """...""" string, escapes included. A single-line string ends at
// the end of its line even without its closing quote (the decoder reports that).
func (s *depthScanner) basicString() {
	if s.at(`"""`) {
		s.multiLine(`"""`, true)
		return
	}
	s.pos++
	for s.pos < len(s.src) {
		switch s.src[s.pos] {
		case '\\':
			s.pos++
			if s.pos < len(s.src) && s.src[s.pos] != '\n' {
				s.pos++
			}
		case '"':
			s.pos++
			return
		case '\n':
			return
		default:
			s.pos++
		}
	}
}

// literalString skips a literal string, single-line or multi-line (no escapes).
func (s *depthScanner) literalString() {
	if s.at(`'''`) {
		s.multiLine(`'''`, false)
		return
	}
	s.pos++
	for s.pos < len(s.src) {
		switch s.src[s.pos] {
		case '\'':
			s.pos++
			return
		case '\n':
			return
		default:
			s.pos++
		}
	}
}

// multiLine skips a multi-line string opened by delim, counting its lines. Up to two more quotes
// right after the closing delimiter belong to the string (`"""a""""` holds `a"`).
func (s *depthScanner) multiLine(delim string, escapes bool) {
	s.pos += len(delim)
	for s.pos < len(s.src) {
		switch c := s.src[s.pos]; {
		case c == '\\' && escapes:
			s.pos++
			if s.peek() == '\n' {
				s.line++
			}
			if s.pos < len(s.src) {
				s.pos++
			}
		case c == '\n':
			s.line++
			s.pos++
		case c == delim[0] && s.at(delim):
			s.pos += len(delim)
			for i := 0; i < 2 && s.peek() == delim[0]; i++ {
				s.pos++
			}
			return
		default:
			s.pos++
		}
	}
}
