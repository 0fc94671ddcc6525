package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/report"
)

// swapTo installs the tuner binary src (tuner-rules or tuner-fault) as dir/tuner-swap with config
// conf, each by a rename, so a running plugin keeps its own file.
func swapTo(t *testing.T, dir, src, conf string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(tunerBin, src))
	require.NoError(t, err)
	tmp := filepath.Join(dir, ".tuner-swap.new")
	require.NoError(t, os.WriteFile(tmp, data, 0o755))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "tuner-swap")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".swap.conf.new"), []byte(conf), 0o644))
	require.NoError(t, os.Rename(filepath.Join(dir, ".swap.conf.new"), filepath.Join(dir, "swap.conf")))
}

// forceAll is a rules configuration forcing RING/PROTO on every collective at every size.
func forceAll(proto string) string {
	var b strings.Builder
	for _, c := range []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce"} {
		fmt.Fprintf(&b, "%s,0,1099511627776,ring,%s,-1,-1,-1\n", c, proto)
	}
	return b.String()
}

// TestHotSwapUnderLoad: 8 clients send batches of plans while the tuner plugin is swapped 20
// times (rules forcing RING/LL, then RING/SIMPLE, alternately) and once replaced by one that
// crashes on every call: no request fails; every answer is labelled with the policy that made it,
// which is the tuner of the generation that answered (its forced cell) or the built-in policy (with
// a note; always for the crashing one); and no batch mixes policies.
func TestHotSwapUnderLoad(t *testing.T) {
	dir := t.TempDir()
	swapTo(t, dir, "tuner-rules", forceAll("ll"))
	cfg := testConfig()
	cfg.Tuners = []plugin.Spec{{Name: filepath.Join(dir, "tuner-swap"), Config: filepath.Join(dir, "swap.conf"), Timeout: 3 * time.Second}}
	cfg.Log, cfg.MaxBatch = io.Discard, 100
	s := newTestServer(t, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	defer func() {
		cancel()
		assert.NoError(t, <-done)
	}()
	url := "http://" + ln.Addr().String() + "/v1/plan"

	var mu sync.Mutex
	kind := map[uint64]string{1: "LL"} // generation -> the proto its tuner forces, or "crash"
	var batch strings.Builder
	batch.WriteString("[")
	n := 0
	for _, c := range []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce"} {
		for _, dt := range []string{"float32", "bfloat16"} {
			if n > 0 {
				batch.WriteString(",")
			}
			fmt.Fprintf(&batch, `{"node":"h100","nodes":2,"coll":%q,"dtype":%q,"bytes":%d,"tuner":"swap"}`, c, dt, 4096<<n)
			n++
		}
	}
	batch.WriteString("]")

	var stop atomic.Bool
	var requests, failures, builtinAnswers, tunerAnswers atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	fail := func(format string, args ...any) {
		failures.Add(1)
		select {
		case errs <- fmt.Sprintf(format, args...):
		default:
		}
	}
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 30 * time.Second}
			for !stop.Load() {
				resp, err := client.Post(url, "application/json", strings.NewReader(batch.String()))
				requests.Add(1)
				if err != nil {
					fail("request: %v", err)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					fail("status %d: %s", resp.StatusCode, body)
					continue
				}
				var b Batch[report.Decision]
				if err := json.Unmarshal(body, &b); err != nil || len(b.Results) != n {
					fail("answer %s: %v", body, err)
					continue
				}
				mu.Lock()
				k, known := kind[b.Generation]
				mu.Unlock()
				pol := b.Results[0].Policy
				for _, a := range b.Results {
					if a.Policy != pol {
						fail("generation %d: policies %s and %s in one batch", b.Generation, pol, a.Policy)
					}
					switch {
					case !known:
						fail("generation %d was never installed", b.Generation)
					case a.Policy == report.BuiltinPolicy:
						if a.TunerNote == "" {
							fail("generation %d: builtin answer without a note", b.Generation)
						}
					case a.Policy != "swap":
						fail("generation %d: policy %q", b.Generation, a.Policy)
					case k == "crash":
						fail("generation %d: the crashing tuner's answer labelled %q (%s/%s, note %q)", b.Generation, a.Policy, a.Algo, a.Proto, a.TunerNote)
					case a.Proto != k || a.Algo != "RING":
						fail("generation %d (forcing RING/%s): %s answered %s/%s", b.Generation, k, a.Query.Coll, a.Algo, a.Proto)
					}
				}
				if pol == report.BuiltinPolicy {
					builtinAnswers.Add(1)
				} else {
					tunerAnswers.Add(1)
				}
			}
		}()
	}
	for i := 1; i <= 20; i++ {
		time.Sleep(150 * time.Millisecond)
		next, src, conf := "LL", "tuner-rules", forceAll("ll")
		if i%2 == 1 {
			next, conf = "SIMPLE", forceAll("simple")
		}
		if i == 13 {
			next, src, conf = "crash", "tuner-fault", "exit\n"
		}
		swapTo(t, dir, src, conf)
		mu.Lock()
		kind[s.gen.Load()+1] = next
		mu.Unlock()
		gen, err := s.Reload()
		require.NoError(t, err)
		require.EqualValues(t, i+1, gen)
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	assert.Zero(t, failures.Load(), "failed or mislabelled answers")
	t.Logf("%d batches: %d answered by a tuner, %d by the built-in policy", requests.Load(), tunerAnswers.Load(), builtinAnswers.Load())
	assert.Positive(t, tunerAnswers.Load())
	assert.Positive(t, builtinAnswers.Load(), "the crashing generation answered with the built-in policy")
}

// TestCrashedTunerKeepsItsBinary: a set's tuner that crashes is restarted from the binary the set
// was loaded with, never from one put in its place for the next reload: with tuner-fault (exit)
// loaded and tuner-rules (forcing RING/LL) installed at the same path afterwards, the requests
// after the restart backoff are still the built-in policy's, with the checksum in the note; only a
// reload runs the new binary.
func TestCrashedTunerKeepsItsBinary(t *testing.T) {
	dir := t.TempDir()
	swapTo(t, dir, "tuner-fault", "exit\n")
	cfg := testConfig()
	cfg.Tuners = []plugin.Spec{{Name: filepath.Join(dir, "tuner-swap"), Config: filepath.Join(dir, "swap.conf"), Timeout: 3 * time.Second}}
	s := newTestServer(t, cfg)
	h := s.Handler()
	q := `{"node":"h100","nodes":2,"coll":"allreduce","bytes":4096,"tuner":"swap"}`
	a, _ := plan1(t, h, q)
	require.Equal(t, report.BuiltinPolicy, a.Policy, "the crashing tuner's first answer")

	swapTo(t, dir, "tuner-rules", forceAll("ll"))
	time.Sleep(1500 * time.Millisecond) // past the client's first restart backoff (1 s)
	a, _ = plan1(t, h, q)
	assert.Equal(t, report.BuiltinPolicy, a.Policy, "answer after the backoff: %s/%s", a.Algo, a.Proto)
	assert.Contains(t, a.TunerNote, "checksum")

	_, err := s.Reload()
	require.NoError(t, err)
	a, _ = plan1(t, h, q)
	assert.Equal(t, "swap", a.Policy, a.TunerNote)
	assert.Equal(t, "RING/LL", a.Algo+"/"+a.Proto)
}

// TestCrashedTunerKeepsItsConfig: the same for the configuration file. tuner-fault loaded with
// "exit" crashes; its configuration is then rewritten to "ok" (a mode in which it answers) at the
// same path, binary unchanged: after the restart backoff the requests are still the built-in
// policy's, saying the configuration changed, never the tuner's answers under the new
// configuration labelled as this set's; only a reload runs it. Failed before the configuration
// was pinned: the restarted tuner answered ("expected: builtin, actual: swap"), which is what
// TestHotSwapUnderLoad met under load when a swap's configuration landed before its reload.
func TestCrashedTunerKeepsItsConfig(t *testing.T) {
	dir := t.TempDir()
	swapTo(t, dir, "tuner-fault", "exit\n")
	cfg := testConfig()
	cfg.Tuners = []plugin.Spec{{Name: filepath.Join(dir, "tuner-swap"), Config: filepath.Join(dir, "swap.conf"), Timeout: 3 * time.Second}}
	s := newTestServer(t, cfg)
	h := s.Handler()
	q := `{"node":"h100","nodes":2,"coll":"allreduce","bytes":4096,"tuner":"swap"}`
	a, _ := plan1(t, h, q)
	require.Equal(t, report.BuiltinPolicy, a.Policy, "the crashing tuner's first answer")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "swap.conf"), []byte("ok\n"), 0o644))
	time.Sleep(1500 * time.Millisecond) // past the client's first restart backoff (1 s)
	a, _ = plan1(t, h, q)
	assert.Equal(t, report.BuiltinPolicy, a.Policy, "answer after the backoff: %s/%s", a.Algo, a.Proto)
	assert.Contains(t, a.TunerNote, "configuration changed")

	_, err := s.Reload()
	require.NoError(t, err)
	a, _ = plan1(t, h, q)
	assert.Equal(t, "swap", a.Policy, a.TunerNote)
}
