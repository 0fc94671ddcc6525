package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/report"
)

// tunerBin holds tuner-rules and tuner-fault, built once by TestMain.
var tunerBin string

func TestMain(m *testing.M) {
	plugin.MainWithCommands(m, &tunerBin, nil, "tuner-rules", "tuner-fault")
}

// rulesConf forces RING/LL with 4 channels below 64 KiB on AllReduce (NCCL's example CSV).
const rulesConf = "allreduce,0,65536,ring,ll,4,-1,-1\n"

func tunerSpec(t *testing.T, name, conf string, timeout time.Duration) plugin.Spec {
	return plugin.Spec{Name: filepath.Join(tunerBin, "tuner-"+name), Config: writeTemp(t, conf), Timeout: timeout}
}

func plan1(t *testing.T, h http.Handler, body string) (report.Decision, *httptest.ResponseRecorder) {
	t.Helper()
	rec := call(t, h, "POST", "/v1/plan", body, nil)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	var a report.Decision
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a))
	return a, rec
}

// TestTunerPolicies: a tuner that answers labels its answers with its name; one that hangs past
// its deadline, crashes or answers garbage never holds the request beyond the deadline, and the
// built-in policy answers, labelled so, with the tuner's note.
func TestTunerPolicies(t *testing.T) {
	const deadline = 400 * time.Millisecond
	cfg := testConfig()
	cfg.Tuners = []plugin.Spec{tunerSpec(t, "rules", rulesConf, 0)}
	h := newTestServer(t, cfg).Handler()
	a, _ := plan1(t, h, `{"node":"h100","nodes":2,"bytes":4096,"tuner":"rules"}`)
	assert.Equal(t, "rules", a.Policy)
	assert.Equal(t, "RING/LL", a.Algo+"/"+a.Proto)
	assert.Equal(t, 4, a.Channels, "the rule's channel count")
	assert.Empty(t, a.TunerNote)
	assert.Contains(t, call(t, h, "GET", "/metrics", "", nil).Body.String(), "collplan_tuner_starts_total 1")

	for _, fault := range []string{"sleep", "exit", "garbage"} {
		t.Run(fault, func(t *testing.T) {
			cfg := testConfig()
			cfg.Tuners = []plugin.Spec{tunerSpec(t, "fault", fault+"\n", deadline)}
			s := newTestServer(t, cfg)
			h := s.Handler()
			t0 := time.Now()
			a, rec := plan1(t, h, `{"node":"h100","nodes":2,"bytes":4096,"tuner":"fault"}`)
			took := time.Since(t0)
			assert.Equal(t, "builtin", a.Policy)
			assert.Equal(t, "builtin", rec.Header().Get("Collplan-Policy"))
			assert.Contains(t, a.TunerNote, "tuner fault failed, using the built-in policy")
			// Start (up to the deadline) and one call (up to the deadline), plus slack for a
			// loaded 2-core machine.
			assert.Less(t, took, 2*deadline+3*time.Second, "the tuner held the request")
			b, _ := plan1(t, h, `{"node":"h100","nodes":2,"bytes":4096}`)
			assert.Equal(t, "builtin", b.Policy, "no tuner asked")
			assert.Empty(t, b.TunerNote)
			m := call(t, h, "GET", "/metrics", "", nil).Body.String()
			assert.Contains(t, m, "collplan_tuner_fallbacks_total 1")
		})
	}
}

// TestReload: a reload reads the topology files again into a new generation; one that fails keeps
// the old set, which goes on answering, and says why (answer, metric); the admin endpoint needs
// its token.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	topo := filepath.Join(dir, "mine.toml")
	s1, err := os.ReadFile(topoDir + "s1.toml")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(topo, s1, 0o644))
	cfg := testConfig()
	cfg.Topologies = []string{topo}
	cfg.AdminTokenFile = writeTemp(t, "admin-token-0123456789")
	s := newTestServer(t, cfg)
	h := s.Handler()
	q := `{"topology":"mine","bytes":"1M"}`
	before := call(t, h, "POST", "/v1/explain", q, nil).Body.String()

	rec := call(t, h, "POST", "/v1/admin/reload", "", nil)
	assert.Equal(t, 401, rec.Code)
	assert.Contains(t, rec.Body.String(), `"field":"Collplan-Admin-Token"`)
	rec = call(t, h, "POST", "/v1/admin/reload", "", map[string]string{"Collplan-Admin-Token": "admin-token-0123456780"})
	assert.Equal(t, 401, rec.Code)
	rec = call(t, h, "POST", "/v1/admin/reload", "", map[string]string{"Collplan-Admin-Token": "admin-token-0123456789"})
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.JSONEq(t, `{"generation":2}`, rec.Body.String())
	_, rec = plan1(t, h, q)
	assert.Equal(t, "2", rec.Header().Get("Collplan-Generation"))

	// A file that no longer parses: the reload fails and generation 2 keeps answering, as before.
	require.NoError(t, os.WriteFile(topo, []byte("n_nodes = \"many\"\n"), 0o644))
	rec = call(t, h, "POST", "/v1/admin/reload", "", map[string]string{"Collplan-Admin-Token": "admin-token-0123456789"})
	assert.Equal(t, 409, rec.Code)
	assert.Contains(t, rec.Body.String(), "reload failed, generation 2 stays")
	assert.Contains(t, rec.Body.String(), "mine.toml")
	gen, err := s.Reload()
	assert.Error(t, err)
	assert.EqualValues(t, 2, gen)
	rec = call(t, h, "POST", "/v1/explain", q, nil)
	assert.Equal(t, "2", rec.Header().Get("Collplan-Generation"))
	assert.Equal(t, before, rec.Body.String(), "the old set answers as before")
	m := call(t, h, "GET", "/metrics", "", nil).Body.String()
	assert.Contains(t, m, `collplan_reloads_total{result="failed"} 2`)
	assert.Contains(t, m, `collplan_reloads_total{result="ok"} 1`)
}

// TestServeDrainsAndReadyz: /readyz says ready once the tuners have answered or fallen back; at
// shutdown a request in flight (held by a tuner that hangs until its deadline) still gets its
// answer.
func TestServeDrainsAndReadyz(t *testing.T) {
	cfg := testConfig()
	cfg.Tuners = []plugin.Spec{tunerSpec(t, "fault", "sleep\n", 1500*time.Millisecond)}
	s := newTestServer(t, cfg)
	rec := call(t, s.Handler(), "GET", "/readyz", "", nil)
	assert.Equal(t, 503, rec.Code, "not ready before the tuners answered")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 20*time.Second, 50*time.Millisecond, "ready once the hanging tuner fell back")

	type result struct {
		code int
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		// A class not seen yet: the tuner is asked and hangs until its deadline.
		resp, err := http.Post(base+"/v1/plan", "application/json",
			strings.NewReader(`{"node":"h200","nodes":4,"bytes":4096,"coll":"allgather","tuner":"fault"}`))
		if err != nil {
			res <- result{err: err}
			return
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = fmt.Fprint(&b, mustReadAll(resp))
		res <- result{code: resp.StatusCode, body: b.String()}
	}()
	time.Sleep(300 * time.Millisecond) // the request is in flight, waiting on the tuner
	cancel()
	r := <-res
	require.NoError(t, r.err)
	assert.Equal(t, 200, r.code, r.body)
	assert.Contains(t, r.body, `"policy":"builtin"`)
	assert.NoError(t, <-done)
	_, err = http.Get(base + "/healthz")
	assert.Error(t, err, "no longer listening")
}

func mustReadAll(resp *http.Response) string {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
