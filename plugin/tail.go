package plugin

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// tail keeps the last max bytes a plugin wrote to stderr, for the failure log: a ring buffer, so
// that a write costs its own length whatever the plugin has written before. (It used to append and
// then copy the whole kept buffer forward on every write: a plugin writing 100 MB of 1 KiB lines
// cost the host 6 s of CPU, and its calls timed out.)
type tail struct {
	mu   sync.Mutex
	buf  []byte // max bytes once full
	next int    // where the next byte goes once full
	full bool
}

func newTail(max int) *tail { return &tail{buf: make([]byte, 0, max)} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, max := len(p), cap(t.buf)
	if len(p) > max {
		p = p[len(p)-max:]
	}
	if !t.full {
		k := min(len(p), max-len(t.buf))
		t.buf = append(t.buf, p[:k]...)
		p = p[k:]
		if len(t.buf) < max {
			return n, nil
		}
		t.full = true
	}
	for len(p) > 0 {
		k := copy(t.buf[t.next:], p)
		p = p[k:]
		t.next = (t.next + k) % max
	}
	return n, nil
}

// bytes returns the kept bytes, oldest first.
func (t *tail) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return slices.Clone(t.buf)
	}
	return append(slices.Clone(t.buf[t.next:]), t.buf[:t.next]...)
}

// String returns the captured text, hclog JSON lines (what a plugin's logger writes) rendered as
// "[LEVEL] message key=value ...".
func (t *tail) String() string {
	raw := string(t.bytes())
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
