package cuda

import (
	"regexp"
	"strings"
)

// PTXFunc is one function defined in a PTX module: an entry (a kernel) or a .func.
type PTXFunc struct {
	Name  string
	Entry bool
	Body  string
	Calls []string // the functions its body calls
}

var (
	ptxDefRE  = regexp.MustCompile(`^(?:\.visible\s+|\.weak\s+)*\.(entry|func)\b.*?([A-Za-z_$][\w$]*)\($`)
	ptxCallRE = regexp.MustCompile(`call(?:\.uni)?\s+(?:\([^)]*\)\s*,\s*)?([A-Za-z_$][\w$]*)`)
)

// ParsePTX returns the functions a PTX module defines, by name (declarations without a body are
// left out).
func ParsePTX(ptx string) map[string]*PTXFunc {
	fns := map[string]*PTXFunc{}
	lines := strings.Split(ptx, "\n")
	for i := 0; i < len(lines); i++ {
		m := ptxDefRE.FindStringSubmatch(strings.TrimRight(lines[i], " \t\r"))
		if m == nil {
			continue
		}
		j := i + 1
		for j < len(lines) && lines[j] != "{" && !strings.HasSuffix(strings.TrimSpace(lines[j]), ";") {
			j++
		}
		if j >= len(lines) || lines[j] != "{" {
			continue // a declaration
		}
		// The body ends where its braces balance (inline asm blocks nest braces, some at column 0).
		k, depth := j+1, 1
		for ; k < len(lines); k++ {
			l, _, _ := strings.Cut(lines[k], "//")
			depth += strings.Count(l, "{") - strings.Count(l, "}")
			if depth == 0 {
				break
			}
		}
		f := &PTXFunc{Name: m[2], Entry: m[1] == "entry", Body: strings.Join(lines[j+1:k], "\n")}
		for _, c := range ptxCallRE.FindAllStringSubmatch(f.Body, -1) {
			f.Calls = append(f.Calls, c[1])
		}
		fns[f.Name] = f
		i = k
	}
	return fns
}

// Reaches reports whether the code that function name runs (its body and every function it
// calls, transitively) contains instr.
func Reaches(fns map[string]*PTXFunc, name, instr string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(n string) bool {
		f, ok := fns[n]
		if !ok || seen[n] {
			return false
		}
		seen[n] = true
		if strings.Contains(f.Body, instr) {
			return true
		}
		for _, c := range f.Calls {
			if walk(c) {
				return true
			}
		}
		return false
	}
	return walk(name)
}
