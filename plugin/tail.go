package plugin

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// tail keeps the last bytes a plugin wrote to stderr, for the failure log.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = slices.Clone(t.buf[over:])
	}
	return len(p), nil
}

// String returns the captured text, hclog JSON lines (what a plugin's logger writes) rendered as
// "[LEVEL] message key=value ...".
func (t *tail) String() string {
	t.mu.Lock()
	raw := string(t.buf)
	t.mu.Unlock()
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(raw, "\n"), "\n") {
		if line == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(render(line))
	}
	return b.String()
}

// render turns one hclog JSON line into text; other lines pass through.
func render(line string) string {
	if !strings.HasPrefix(line, "{") {
		return line
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return line
	}
	msg, ok := m["@message"].(string)
	if !ok {
		return line
	}
	out := fmt.Sprintf("[%s] %s", strings.ToUpper(fmt.Sprint(m["@level"])), msg)
	keys := make([]string, 0, len(m))
	for k := range m {
		if !strings.HasPrefix(k, "@") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		out += fmt.Sprintf(" %s=%v", k, m[k])
	}
	return out
}

// summary picks the telling line of a plugin's stderr for a one-line note: a Go panic or fatal
// error, else the last warning or error log line, else the last line that is not a debug log line;
// at most 200 bytes.
func summary(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	pick := ""
	for _, l := range lines {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			pick = l
			break
		}
	}
	for i := len(lines) - 1; i >= 0 && pick == ""; i-- {
		if l := strings.TrimSpace(lines[i]); strings.HasPrefix(l, "[ERROR] ") || strings.HasPrefix(l, "[WARN] ") {
			pick = l
		}
	}
	for i := len(lines) - 1; i >= 0 && pick == ""; i-- {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "[DEBUG] ") && !strings.HasPrefix(l, "[TRACE] ") && !strings.HasPrefix(l, "[INFO] ") &&
			!strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, "goroutine ") {
			pick = l
		}
	}
	if len(pick) > 200 {
		pick = pick[:200] + "..."
	}
	return pick
}
