package tables

import (
	"fmt"
	"strconv"
	"strings"
)

// scan is what one line-by-line pass over a table's raw text finds: the source tag of every numeric
// key (the text of its trailing comment) and the line of every key and table header. It runs on text
// that toml.Decode has accepted, so it only has to be right for valid TOML.
type scan struct {
	sources map[string]string // numeric key path -> source tag
	lines   map[string]int    // key or header path, "[i]" marking array-of-tables elements -> line
	flat    map[string]int    // the same paths without "[i]" (as toml.Key spells them) -> first line
	keys    []string          // key/value paths, in file order
	arrays  []string          // array-of-tables paths without the index, e.g. "corrections.cell"
}

// lineOf returns the line of path, or of its nearest ancestor that has one, or 0.
func (s *scan) lineOf(p string) int {
	if s == nil {
		return 0
	}
	for p != "" {
		if l, ok := s.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

// pendingValue is a value that spans several lines (a multi-line array or inline table).
type pendingValue struct {
	path  string
	tag   string
	code  strings.Builder
	depth int
}

func scanSource(data []byte) *scan {
	sc := &scan{
		sources: map[string]string{},
		lines:   map[string]int{},
		flat:    map[string]int{},
	}
	var (
		table      string             // resolved path of the current [table] / [[array]]
		arrIdx     = map[string]int{} // resolved array-of-tables path -> index of its last element
		arraysSeen = map[string]bool{}
		mlDelim    string // closing delimiter of a multi-line string in progress
		pending    *pendingValue
	)
	resolve := func(elems []string, isArray bool) string {
		cur := ""
		for i, e := range elems {
			if cur == "" {
				cur = e
			} else {
				cur += "." + e
			}
			switch v, ok := arrIdx[cur]; {
			case isArray && i == len(elems)-1:
				idx := 0
				if ok {
					idx = v + 1
				}
				arrIdx[cur] = idx
				if !arraysSeen[cur] {
					arraysSeen[cur] = true
					sc.arrays = append(sc.arrays, cur)
				}
				cur = fmt.Sprintf("%s[%d]", cur, idx)
			case ok:
				cur = fmt.Sprintf("%s[%d]", cur, v)
			}
		}
		return cur
	}
	record := func(p string, line int) {
		sc.lines[p] = line
		f := flatPath(p)
		if _, ok := sc.flat[f]; !ok {
			sc.flat[f] = line
		}
	}
	finish := func(p, tag, code string) {
		code = strings.TrimSpace(code)
		if tag != "" && (isNumeric(code) || strings.HasPrefix(code, "{")) {
			sc.sources[p] = tag
		}
	}

	for i, raw := range strings.Split(string(data), "\n") {
		ln := i + 1
		line := strings.TrimRight(raw, "\r")
		if mlDelim != "" {
			if strings.Contains(line, mlDelim) {
				mlDelim = ""
			}
			continue
		}
		if pending != nil {
			code, comment, depth := scanValue(line, pending.depth)
			pending.code.WriteString(" ")
			pending.code.WriteString(code)
			pending.depth = depth
			if depth <= 0 {
				if pending.tag == "" {
					pending.tag = comment
				}
				finish(pending.path, pending.tag, pending.code.String())
				pending = nil
			}
			continue
		}
		t := strings.TrimSpace(line)
		if t == "" || t[0] == '#' {
			continue
		}
		if t[0] == '[' {
			isArray := strings.HasPrefix(t, "[[")
			open := 1
			if isArray {
				open = 2
			}
			end := closeBracket(t, open)
			table = resolve(parseKey(t[open:end]), isArray)
			record(table, ln)
			continue
		}
		eq := indexOutsideQuotes(t, '=')
		if eq < 0 {
			continue
		}
		p := joinPath(table, parseKey(t[:eq]))
		record(p, ln)
		sc.keys = append(sc.keys, p)
		v := strings.TrimSpace(t[eq+1:])
		if d := v[:min(3, len(v))]; d == `"""` || d == `'''` {
			if !strings.Contains(v[3:], d) {
				mlDelim = d
			}
			continue
		}
		code, comment, depth := scanValue(v, 0)
		if depth > 0 {
			pending = &pendingValue{path: p, tag: comment, depth: depth}
			pending.code.WriteString(code)
			continue
		}
		finish(p, comment, code)
	}
	return sc
}

// scanValue scans one line of a value starting at bracket depth depth. It returns the code before any
// comment, the comment's text (trimmed, without '#'), and the depth at the end of the line.
func scanValue(s string, depth int) (code, comment string, _ int) {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '"' && c == '\\':
			i++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#':
			return s[:i], strings.TrimSpace(s[i+1:]), depth
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		}
	}
	return s, "", depth
}

// closeBracket returns the index of the "]" (or "]]") closing a header that opens with open brackets.
func closeBracket(t string, open int) int {
	if i := indexOutsideQuotes(t[open:], ']'); i >= 0 {
		return open + i
	}
	return len(t)
}

func indexOutsideQuotes(s string, want byte) int {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '"' && c == '\\':
			i++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == want:
			return i
		}
	}
	return -1
}

// parseKey splits a (possibly dotted, possibly quoted) TOML key into its parts.
func parseKey(s string) []string {
	var parts []string
	for {
		i := indexOutsideQuotes(s, '.')
		part := s
		if i >= 0 {
			part = s[:i]
		}
		part = strings.TrimSpace(part)
		switch {
		case len(part) >= 2 && part[0] == '"':
			if u, err := strconv.Unquote(part); err == nil {
				part = u
			} else {
				part = part[1 : len(part)-1]
			}
		case len(part) >= 2 && part[0] == '\'':
			part = part[1 : len(part)-1]
		}
		parts = append(parts, part)
		if i < 0 {
			return parts
		}
		s = s[i+1:]
	}
}

func joinPath(prefix string, elems []string) string {
	p := strings.Join(elems, ".")
	if prefix == "" {
		return p
	}
	return prefix + "." + p
}

// flatPath drops the "[i]" indices of array-of-tables elements.
func flatPath(p string) string {
	if !strings.Contains(p, "[") {
		return p
	}
	var b strings.Builder
	skip := false
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '[':
			skip = true
		case c == ']':
			skip = false
		case !skip:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// isNumeric reports whether a value's code is a number or an array (of arrays) of numbers.
func isNumeric(code string) bool {
	code = strings.TrimSpace(code)
	if code == "" {
		return false
	}
	if code[0] != '[' {
		return numericToken(code)
	}
	fields := strings.Fields(strings.NewReplacer("[", " ", "]", " ", ",", " ").Replace(code))
	if len(fields) == 0 {
		return false
	}
	for _, f := range fields {
		if !numericToken(f) {
			return false
		}
	}
	return true
}

func numericToken(s string) bool {
	s = strings.ReplaceAll(s, "_", "")
	if _, err := strconv.ParseInt(s, 0, 64); err == nil {
		return true
	}
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}
