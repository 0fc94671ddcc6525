package web_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/service"
	"github.com/collplan/collplan/service/web"
)

const (
	sweepFile  = "../../calibrate/testdata/sweeps/ar_current_h100_1n8g.txt"
	tuningFile = "../../calibrate/testdata/tuning/tuning_2.30_h100_tagged.log"
)

// chromium is the browser the test drives: $COLLPLAN_CHROMIUM, else chromium on PATH (Debian's
// package installs /usr/bin/chromium).
func chromium() string {
	if p := os.Getenv("COLLPLAN_CHROMIUM"); p != "" {
		return p
	}
	p, _ := exec.LookPath("chromium")
	return p
}

// startService serves the embedded map and the API on a loopback port, in process.
func startService(t *testing.T) string {
	t.Helper()
	srv, err := service.New(service.Config{Listen: "127.0.0.1:0", Log: io.Discard, Assets: web.FS})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
	})
	return "http://" + ln.Addr().String()
}

func post(t *testing.T, base, path string, body any, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := http.Post(base+path, "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, data)
	require.NoError(t, json.Unmarshal(data, out), "%s: %s", path, data)
}

// menuCell is one row of /v1/explain's menu.
type menuCell struct {
	Algo        string  `json:"algo"`
	Proto       string  `json:"proto"`
	LatUS       float64 `json:"lat_us"`
	BwGBps      float64 `json:"bw_gbps"`
	Correction  float64 `json:"correction"`
	ModelTimeUS float64 `json:"model_time_us"`
	TimeUS      float64 `json:"time_us"`
	Reason      string  `json:"reason"`
}

type explainAnswer struct {
	Algo  string     `json:"algo"`
	Proto string     `json:"proto"`
	Menu  []menuCell `json:"menu"`
}

type mapAnswer struct {
	Rows []struct {
		Nodes int `json:"nodes"`
		Bands []struct {
			Lo    int64  `json:"lo"`
			Hi    int64  `json:"hi"`
			Algo  string `json:"algo"`
			Proto string `json:"proto"`
		} `json:"bands"`
	} `json:"rows"`
}

// domMenu is the menu as the page's DOM holds it: per row, each cell's text and its data-v.
type domMenu struct {
	Nodes int64 `json:"nodes"`
	Bytes int64 `json:"bytes"`
	Rows  []struct {
		Algo  string            `json:"algo"`
		Proto string            `json:"proto"`
		Pick  bool              `json:"pick"`
		Text  map[string]string `json:"text"`
		V     map[string]string `json:"v"`
	} `json:"rows"`
}

const readMenuJS = `(() => {
  const m = document.getElementById("menu");
  const rows = [...m.tBodies[0].rows].map((tr) => {
    const text = {}, v = {};
    for (const td of tr.querySelectorAll("td[data-key]")) { text[td.dataset.key] = td.textContent; v[td.dataset.key] = td.dataset.v; }
    return { algo: tr.dataset.algo, proto: tr.dataset.proto, pick: tr.classList.contains("pick"), text, v };
  });
  return { nodes: Number(m.dataset.nodes), bytes: Number(m.dataset.bytes), rows };
})()`

// checkMenu compares the page's menu with /v1/explain at the same point, cell by cell: each
// value the page holds parses to the API's number exactly, and its text is that number with two
// decimals ("-" where the cell is not legal: time -1, and its bandwidth and correction unused).
func checkMenu(t *testing.T, got *domMenu, want *explainAnswer) {
	t.Helper()
	require.Len(t, got.Rows, len(want.Menu))
	for i, w := range want.Menu {
		g := got.Rows[i]
		name := w.Algo + "/" + w.Proto
		assert.Equal(t, w.Algo, g.Algo, "row %d", i)
		assert.Equal(t, w.Proto, g.Proto, "row %d", i)
		assert.Equal(t, w.Algo == want.Algo && w.Proto == want.Proto, g.Pick, "%s: marked as the pick", name)
		legal := w.TimeUS >= 0
		for key, v := range map[string]float64{"lat_us": w.LatUS, "bw_gbps": w.BwGBps, "correction": w.Correction,
			"model_time_us": w.ModelTimeUS, "time_us": w.TimeUS} {
			pv, err := strconv.ParseFloat(g.V[key], 64)
			if assert.NoError(t, err, "%s %s: data-v %q", name, key, g.V[key]) {
				assert.Equal(t, v, pv, "%s %s", name, key)
			}
			text := fmt.Sprintf("%.2f", v)
			if v < 0 || (!legal && key != "lat_us") {
				text = "-"
			}
			assert.Equal(t, text, g.Text[key], "%s %s shown", name, key)
		}
		assert.Equal(t, w.Reason, g.V["reason"], "%s reason", name)
	}
}

// countRows counts the data rows of an nccl-tests table: lines whose first two fields are the
// size and the count (integers), then a type name.
func countRows(t *testing.T, file string) int {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	re := regexp.MustCompile(`^\s*\d+\s+\d+\s+[a-z]`)
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if re.MatchString(sc.Text()) {
			n++
		}
	}
	return n
}

// diffCount is the number of size intervals where two maps' rows pick differently, found by
// walking every size where either row's pick may change (brute force over the band edges).
func diffCount(a, b *mapAnswer) int {
	n := 0
	for _, ra := range a.Rows {
		for _, rb := range b.Rows {
			if ra.Nodes != rb.Nodes || len(ra.Bands) == 0 || len(rb.Bands) == 0 {
				continue
			}
			pick := func(bands []struct {
				Lo    int64  `json:"lo"`
				Hi    int64  `json:"hi"`
				Algo  string `json:"algo"`
				Proto string `json:"proto"`
			}, s int64) string {
				for _, bd := range bands {
					if s >= bd.Lo && s <= bd.Hi {
						return bd.Algo + "/" + bd.Proto
					}
				}
				return ""
			}
			var edges []int64
			for _, bd := range ra.Bands {
				edges = append(edges, bd.Lo)
			}
			for _, bd := range rb.Bands {
				edges = append(edges, bd.Lo)
			}
			// Each edge starts a piece on which both picks are constant; a run of differing
			// pieces with the same pair of picks is one interval.
			seen := map[int64]bool{}
			var uniq []int64
			for _, e := range edges {
				if !seen[e] {
					seen[e] = true
					uniq = append(uniq, e)
				}
			}
			sortInt64(uniq)
			prev := ""
			for _, e := range uniq {
				pa, pb := pick(ra.Bands, e), pick(rb.Bands, e)
				cur := ""
				if pa != pb {
					cur = pa + ">" + pb
				}
				if cur != "" && cur != prev {
					n++
				}
				prev = cur
			}
		}
	}
	return n
}

func sortInt64(s []int64) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// js runs a script in the page as one step.
func js(script string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](script)(ctx, tg)
		return err
	})
}

// setSelect sets a form control's value and fires its change event, as a user's choice does.
func setSelect(id, value string) chromedp.Action[chromedp.Void] {
	return js(fmt.Sprintf(`(() => { const e = document.getElementById(%q); e.value = %q;
	  e.dispatchEvent(new Event("change")); return e.value; })()`, id, value))
}

func setCheck(id string, on bool) chromedp.Action[chromedp.Void] {
	return js(fmt.Sprintf(`(() => { const e = document.getElementById(%q); e.checked = %v;
	  e.dispatchEvent(new Event("change")); return e.checked; })()`, id, on))
}

// waitCount polls until the page has n elements matching sel.
func waitCount(sel string, n int) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for {
			got, err := chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel))(ctx, tg)
			if err != nil {
				return err
			}
			if got == n {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: %d elements, want %d: %w", sel, got, n, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}

func count(ctx context.Context, t *testing.T, sel string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
	require.NoError(t, err)
	return n
}

func attr(ctx context.Context, t *testing.T, sel, name string) string {
	t.Helper()
	a, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(sel), name))
	require.NoError(t, err)
	require.True(t, a.Exists, "%s has %s", sel, name)
	return a.Value
}

func attrInt(ctx context.Context, t *testing.T, sel, name string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(attr(ctx, t, sel, name), 10, 64)
	require.NoError(t, err)
	return v
}

func readMenu(ctx context.Context, t *testing.T) *domMenu {
	t.Helper()
	m, err := chromedp.Run(ctx, chromedp.Evaluate[domMenu](readMenuJS))
	require.NoError(t, err)
	return &m
}

func screenshot(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	dir := os.Getenv("COLLPLAN_WEBMAP_SCREENSHOTS") // docs/ to refresh the README's pictures
	if dir == "" {
		dir = t.TempDir()
	}
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, png, 0o644))
	t.Logf("screenshot %s (%d bytes)", p, len(png))
}

func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}

// TestBrowserMap drives the map in headless Chromium: it loads the map, switches collective and
// node count, clicks a band and checks the menu the page shows against /v1/explain at that
// point; Enter on a focused band does the same; it uploads a sweep and a TUNING log and counts the
// points drawn against the files; the diff marks as many intervals as the two maps differ in; the
// time view marks one crossover per band edge. It saves screenshots of both views.
func TestBrowserMap(t *testing.T) {
	path := chromium()
	if path == "" {
		if os.Getenv("COLLPLAN_REQUIRE_BROWSER") == "1" {
			t.Fatal("COLLPLAN_REQUIRE_BROWSER=1 but no chromium on PATH (apt-get install chromium, or set COLLPLAN_CHROMIUM)")
		}
		t.Skip("no chromium on PATH: the browser test skips (apt-get install chromium; COLLPLAN_REQUIRE_BROWSER=1 makes this a failure)")
	}
	base := startService(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 800),
		chromedp.DisableGPU)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run its sandbox as root (CI containers)
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	var mu sync.Mutex
	var jsErrors []string
	require.NoError(t, chromedp.Listen(bctx, func(ev any) {
		if e, ok := ev.(*cdpruntime.EventExceptionThrown); ok {
			mu.Lock()
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			jsErrors = append(jsErrors, fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber+1, msg))
			mu.Unlock()
		}
	}))
	// The browser lives as long as bctx; each step below is bounded by ctx.
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	ready := func(extra string) chromedp.Action[chromedp.Void] { return visible(`#svg[data-state="ready"]` + extra) }
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(base+"/"),
		ready(`[data-coll="AllReduce"]`)))
	// The page prints numbers as planner explain does (Go's %.2f), exact ties included.
	vals := []float64{43.125, 0.125, 0.375, 25.200000762939453, 1.005, 99.595, 0, 2.5, 12345.675, 0.005, 133.47686767578125}
	vj, err := json.Marshal(vals)
	require.NoError(t, err)
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](fmt.Sprintf(`%s.map(fmtNum)`, vj)))
	require.NoError(t, err)
	for i, v := range vals {
		assert.Equal(t, fmt.Sprintf("%.2f", v), shown[i], "fmtNum(%v)", v)
	}
	require.Positive(t, count(ctx, t, "rect.band"), "the map draws bands")
	require.Positive(t, count(ctx, t, "#legend .item"), "the map has a legend")

	// Switch collective and node count, click a band of that row.
	const nodes = 16
	require.NoError(t, chromedp.Do(ctx, setSelect("coll", "allgather"), ready(`[data-coll="AllGather"]`),
		setSelect("nodes", strconv.Itoa(nodes)), ready(fmt.Sprintf(`[data-nodes="%d"]`, nodes))))
	band := fmt.Sprintf(`rect.band[data-nodes="%d"]`, nodes)
	nb := count(ctx, t, band)
	require.Positive(t, nb, "row %d has bands", nodes)
	sel := fmt.Sprintf(`%s[data-k="%d"]`, band, min(1, nb-1)) // the band after the first crossover, when there is one
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)), visible(`#menu[data-ready="1"][data-pinned="1"]`)))
	got := readMenu(ctx, t)
	require.EqualValues(t, nodes, got.Nodes)
	blo, bhi := attrInt(ctx, t, sel, "data-lo"), attrInt(ctx, t, sel, "data-hi")
	require.True(t, got.Bytes >= blo && got.Bytes <= bhi, "clicked point %d B lies in the band [%d, %d]", got.Bytes, blo, bhi)
	var want explainAnswer
	post(t, base, "/v1/explain", map[string]any{"node": "h100", "coll": "allgather", "dtype": "float32", "op": "sum",
		"nodes": nodes, "bytes": got.Bytes}, &want)
	checkMenu(t, got, &want)
	assert.Equal(t, attr(ctx, t, sel, "data-algo")+"/"+attr(ctx, t, sel, "data-proto"), want.Algo+"/"+want.Proto,
		"the band's pick is explain's pick at the clicked point")

	// Hover: Escape unpins; the pointer over the row's first band shows that point's menu, unpinned.
	first := fmt.Sprintf(`%s[data-k="0"]`, band)
	centre, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](fmt.Sprintf(`(() => {
	  const r = document.querySelector(%q).getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()`, first)))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.KeyEvent(kb.Escape), visible(`#menu[data-pinned="0"]`),
		js(`document.getElementById("menu").dataset.ready = "0"`),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, centre[0], centre[1]),
		visible(`#menu[data-ready="1"][data-pinned="0"][data-nodes="16"]`)))
	got = readMenu(ctx, t)
	blo, bhi = attrInt(ctx, t, first, "data-lo"), attrInt(ctx, t, first, "data-hi")
	require.True(t, got.Bytes >= blo && got.Bytes <= bhi, "hovered point %d B lies in the band [%d, %d]", got.Bytes, blo, bhi)
	want = explainAnswer{}
	post(t, base, "/v1/explain", map[string]any{"node": "h100", "coll": "allgather", "nodes": nodes, "bytes": got.Bytes}, &want)
	checkMenu(t, got, &want)

	// Keyboard: Tab from the last control of the header reaches the first band (top row), which
	// shows its focus; ArrowRight moves to the next band of the row.
	require.NoError(t, chromedp.Do(ctx, chromedp.Focus(chromedp.ID("nooverlay2")), chromedp.KeyEvent(kb.Tab)))
	focused, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => { const e = document.activeElement;
	  return [e.getAttribute("class") || "", e.dataset.k || "", getComputedStyle(e).strokeWidth]; })()`))
	require.NoError(t, err)
	assert.Equal(t, []string{"band", "0", "3px"}, focused, "Tab reaches the first band, drawn with a 3 px focus edge")
	require.NoError(t, chromedp.Do(ctx, chromedp.KeyEvent(kb.ArrowRight)))
	k1, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.dataset.k`))
	require.NoError(t, err)
	assert.Equal(t, "1", k1, "ArrowRight focuses the next band")

	// Enter on a focused band pins the menu at the band's middle size.
	require.NoError(t, chromedp.Do(ctx, js(`document.getElementById("menu").dataset.ready = "0"`),
		chromedp.Focus(chromedp.CSS(first)), chromedp.KeyEvent(kb.Enter),
		visible(`#menu[data-ready="1"][data-pinned="1"][data-nodes="16"]`)))
	got = readMenu(ctx, t)
	blo, bhi = attrInt(ctx, t, first, "data-lo"), attrInt(ctx, t, first, "data-hi")
	require.True(t, got.Bytes >= blo && got.Bytes <= bhi, "Enter's point %d B lies in the band [%d, %d]", got.Bytes, blo, bhi)
	want = explainAnswer{}
	post(t, base, "/v1/explain", map[string]any{"node": "h100", "coll": "allgather", "nodes": nodes, "bytes": got.Bytes}, &want)
	checkMenu(t, got, &want)

	// Overlays: the sweep is AllReduce on 1 node of 8 H100s, every row valid; the log's
	// AllReduce decisions are lines 38-46 of the file: 8 B (twice), 4 KiB, 64 KiB, 1 MiB, 2 MiB
	// and 64 MiB, 6 distinct (line 44 names no protocol and is rejected). The log gives 8 ranks
	// and no node count: 8 ranks / 8 GPUs per node put it on 1 node.
	// Bad input: a file that is no sweep is refused, the page says which file and why, and
	// draws nothing.
	bad, err := filepath.Abs("testdata/not-a-sweep.txt")
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.SetUploadFiles(chromedp.CSS("#sweepfile"), []string{bad}), visible("#status.error")))
	msg, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("status").textContent`))
	require.NoError(t, err)
	assert.Contains(t, msg, "not-a-sweep.txt:2: no nccl-tests table")
	assert.Zero(t, count(ctx, t, "circle.measured"))

	rows := countRows(t, sweepFile)
	require.Equal(t, 31, rows, "the sweep's rows: 8 B to 8 GiB by doubling")
	abs, err := filepath.Abs(sweepFile)
	require.NoError(t, err)
	absLog, err := filepath.Abs(tuningFile)
	require.NoError(t, err)
	// The pinned menu follows the class: switching to AllReduce prices the same point again.
	pinned := got.Bytes
	require.NoError(t, chromedp.Do(ctx, setSelect("coll", "allreduce"), ready(`[data-coll="AllReduce"]`),
		visible(`#menu[data-ready="1"][data-pinned="1"][data-coll="AllReduce"]`)))
	got = readMenu(ctx, t)
	require.Equal(t, pinned, got.Bytes)
	want = explainAnswer{}
	post(t, base, "/v1/explain", map[string]any{"node": "h100", "coll": "allreduce", "nodes": nodes, "bytes": pinned}, &want)
	checkMenu(t, got, &want)

	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetUploadFiles(chromedp.CSS("#sweepfile"), []string{abs}), waitCount("circle.measured", rows),
		chromedp.SetUploadFiles(chromedp.CSS("#tuningfile"), []string{absLog}), waitCount("path.logged", 6)))

	// Diff against h200 without overlay: as many marked intervals as the two maps differ in.
	var m1, m2 mapAnswer
	post(t, base, "/v1/map", map[string]any{"node": "h100"}, &m1)
	var counts []int
	for _, r := range m1.Rows {
		counts = append(counts, r.Nodes)
	}
	post(t, base, "/v1/map", map[string]any{"node": "h200", "no_overlay": true, "node_counts": counts}, &m2)
	nd := diffCount(&m1, &m2)
	require.Positive(t, nd, "h100 and h200 differ somewhere")
	require.NoError(t, chromedp.Do(ctx, setSelect("table2", "h200"), setCheck("diff", true),
		waitCount("#diffinfo li.diff-item", nd), waitCount("#svg rect.diff", nd),
		setSelect("nodes", "1"), ready(`[data-nodes="1"]`),
		chromedp.Click(chromedp.CSS(`rect.band[data-nodes="1"][data-k="0"]`)),
		visible(`#menu[data-ready="1"][data-pinned="1"][data-nodes="1"]`)))
	screenshot(ctx, t, "webmap.png")

	// The time view at 1 node: one crossover per band edge of /v1/map's row, the measured points.
	var row1 mapAnswer
	post(t, base, "/v1/map", map[string]any{"node": "h100", "node_counts": []int{1}}, &row1)
	require.Len(t, row1.Rows, 1)
	nx := len(row1.Rows[0].Bands) - 1
	require.NoError(t, chromedp.Do(ctx, setSelect("view", "time"), ready(`[data-view="time"][data-nodes="1"]`),
		waitCount("line.crossover", nx), waitCount("circle.measured", rows), waitCount("button.crossover-item", nx)))
	assert.Positive(t, count(ctx, t, "path.cell"), "the time view draws the legal cells")
	assert.Equal(t, len(row1.Rows[0].Bands), count(ctx, t, "path.pick"), "one pick segment per band")
	screenshot(ctx, t, "webmap-time.png")
	assert.Zero(t, count(ctx, t, "#status.error"), "the page reported no error")
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, jsErrors, "uncaught exceptions in the page")
}
