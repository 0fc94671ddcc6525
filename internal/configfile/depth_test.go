package configfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNesting: the depth of each document is derived by hand from its tree (a key of a header or
// dotted key is one level, an array one more); line is where the first level over max is.
func TestNesting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    string
		max   int
		line  int // 0: within max
		depth int
	}{
		{"empty", "", 1, 0, 0},
		{"one key", "a = 1\n", 1, 0, 0},
		{"dotted key", "a.b = 1\n", 1, 1, 2},
		{"dotted key with blanks and quotes", "a . \"b.c\" . 'd.e' = 1\n", 3, 0, 0},
		{"dotted key one over", "a . \"b.c\" . 'd.e' = 1\n", 2, 1, 3},
		{"array", "a = [1]\n", 1, 1, 2},
		{"array within", "a = [1]\n", 2, 0, 0},
		{"empty array adds no level", "a = []\nb = [[]]\n", 2, 0, 0},
		{"header", "x = 1\n[a.b.c]\nd = 1\n", 3, 3, 4},
		{"header within", "[a.b.c]\nd = 1\n", 4, 0, 0},
		{"header alone", "[a.b.c]\n", 2, 1, 3},
		{"header with quoted parts", "[ \"a.b\" . 'c' ]\nd = 1\n", 3, 0, 0},
		{"array of tables", "[[a]]\nb = 1\n", 2, 2, 3},
		{"array of tables within", "[[a]]\nb = 1\n", 3, 0, 0},
		{"table under an array of tables", "[[a]]\n[a.b]\nc = 1\n", 3, 3, 4},
		{"array of tables under one", "[[a]]\n[[a.b]]\nc = 1\n", 4, 3, 5},
		{"quoted array-of-tables name", "[[\"a\"]]\n[a.b]\n", 2, 2, 3},
		{"inline table", "a = {b = {c = 1}}\n", 2, 1, 3},
		{"inline table within", "a = {b = {c = 1}}\n", 3, 0, 0},
		{"inline table in an array", "a = [{b = 1}]\n", 2, 1, 3},
		{"dotted key in an inline table", "a = {b.c.d = 1}\n", 3, 1, 4},
		{"inline table across lines", "a = {\n  b = {\n    c = 1 } }\n", 2, 3, 3},

		{"brackets in a basic string", "a = \"[[[{{{\"\n", 1, 0, 0},
		{"brackets in a literal string", "a = '[[[ {{{ \\'\nb = 1\n", 1, 0, 0},
		{"escaped quote", "a = \"\\\" [[[\"\nb = [1]\n", 1, 2, 2},
		{"escaped backslash before the quote", "a = \"x\\\\\"\nb = [1]\n", 1, 2, 2},
		{"hash in a string", "a = [\"#\", [1]]\n", 2, 1, 3},
		{"multi-line basic string", "a = \"\"\"\n[[[\n{{{ \"\" \\\"\"\"\n\"\"\"\nb = [1]\n", 1, 5, 2},
		{"multi-line literal string", "a = '''\n[[[\n{{{ '' \\\n'''\nb = [1]\n", 1, 5, 2},
		{"extra quotes before a closing delimiter", "a = \"\"\"x\"\"\"\"\"\nb = [1]\n", 1, 2, 2},
		{"extra quotes before a closing literal", "a = '''x'''''\nb = [1]\n", 1, 2, 2},
		{"line-ending backslash", "a = \"\"\"x \\\n  y\"\"\"\nb = [1]\n", 1, 3, 2},
		{"comment with brackets", "# [[[[ {{{ \"\na = 1 # ]]] [[[ '\n", 1, 0, 0},
		{"comment in a multi-line array", "a = [\n  1, # [[[\n  [2],\n]\nb.c.d = 1\n", 3, 0, 0},
		{"comment in a multi-line array one over", "a = [\n  1, # [[[\n  [2],\n]\n", 2, 3, 3},
		{"date with a blank", "a = 1979-05-27 07:32:00Z\nb = [1]\n", 2, 0, 0},
		{"CRLF", "a = 1\r\nb = [1]\r\n", 1, 2, 2},

		// Not TOML: the brackets still count.
		{"brackets after a value", "x = 1 [[[[\n", 3, 1, 4},
		{"brackets opening a line", "[[[[[[\n", 3, 1, 4},
		{"braces without keys", "x = {{{{{\n", 3, 1, 4},
		{"unterminated string", "a = \"[[[[\nb = [[1]]\n", 1, 2, 2},
		{"unterminated multi-line string", "a = '''[[[[\nb = [[1]]\n", 1, 0, 0},
		{"NUL bytes", "a = [\x00, \x00[\x00]]\n", 2, 1, 3},
		{"backslash at the end", "a = \"\\", 1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line, depth, ok := nesting([]byte(tc.in), tc.max)
			assert.Equal(t, tc.line == 0, ok)
			assert.Equal(t, tc.line, line, "line")
			assert.Equal(t, tc.depth, depth, "depth")
		})
	}
}

// TestNestingOfDeepInputIsCheap: 4 MiB of nesting of each kind is refused at its first level too
// deep, in one pass with little memory, where the decoder needs gigabytes for 72 KB.
func TestNestingOfDeepInputIsCheap(t *testing.T) {
	const n = 1 << 20
	for name, in := range map[string]string{
		"inline tables": "x = " + strings.Repeat("{a=", n),
		"arrays":        "x = " + strings.Repeat("[", 4*n),
		"dotted key":    strings.Repeat("a.", 2*n) + "b = 1\n",
		"table header":  "[" + strings.Repeat("a.", 2*n) + "b]\n",
	} {
		t.Run(name, func(t *testing.T) {
			data := []byte(in)
			var line, depth int
			var ok bool
			allocs := allocated(func() { line, depth, ok = nesting(data, 8) })
			assert.False(t, ok)
			assert.Equal(t, 1, line)
			assert.Equal(t, 9, depth)
			assert.Less(t, allocs, uint64(64<<10), "bytes allocated")
		})
	}
}

// treeDepth is the length of the longest path in a decoded document: a key or an array element is
// one level.
func treeDepth(v any) int {
	d := 0
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			d = max(d, 1+treeDepth(e))
		}
	case []map[string]any:
		for _, e := range x {
			d = max(d, 1+treeDepth(e))
		}
	case []any:
		for _, e := range x {
			d = max(d, 1+treeDepth(e))
		}
	}
	return d
}

// seedTOML adds the project's TOML files (shipped tables, overlays, testdata) to f.
func seedTOML(f *testing.F) {
	var files []string
	for _, pat := range []string{"../../tables/*.toml", "../../tables/testdata/*/*.toml", "../../capabilities/testdata/topology/*.toml",
		"../../capabilities/testdata/topology/bad/*.toml", "../../calibrate/testdata/manifests/*.toml", "../../plugin/policy/regions/testdata/*.toml"} {
		m, err := filepath.Glob(pat)
		require.NoError(f, err)
		files = append(files, m...)
	}
	require.NotEmpty(f, files)
	for _, p := range files {
		data, err := os.ReadFile(p)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte("a = [[1, [2]], {b = {c = [{}]}}]\n[[x]]\n[x.y]\nz.w = '''\n[['''\n"))
}

// FuzzNesting: the scan never panics or hangs, and on every document the decoder accepts it finds
// exactly the decoded tree's depth.
func FuzzNesting(f *testing.F) {
	seedTOML(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, _ = nesting(data, 3)
		var v map[string]any
		if _, err := toml.Decode(string(data), &v); err != nil {
			return
		}
		d := treeDepth(v)
		_, got, ok := nesting(data, max(d, 1))
		require.True(t, ok, "within the tree's depth %d, got %d", d, got)
		if d > 1 {
			_, got, ok = nesting(data, d-1)
			require.False(t, ok, "deeper than %d", d-1)
			assert.Equal(t, d, got)
		}
	})
}
