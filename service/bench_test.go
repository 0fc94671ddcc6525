package service

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkBatchPlan is one batch of 1,000 plans of one cached class through the handler
// (decisions/s = 1000 x batches/s); bench/run-serve.sh measures the same over loopback with wrk.
func BenchmarkBatchPlan(b *testing.B) {
	cfg := testConfig()
	cfg.MaxBatch, cfg.Log = 1000, io.Discard
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	q := make([]string, 1000)
	for i := range q {
		q[i] = fmt.Sprintf(`{"node":"h200","nodes":4,"bytes":%d}`, (i+1)*4099)
	}
	body := "[" + strings.Join(q, ",") + "]"
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest("POST", "/v1/plan", strings.NewReader(body))
		req.Host = "127.0.0.1:7480"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Body.String())
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkColdExplain is an explain of a class never seen before (a new pipe-ops count and
// collective each time: the menu is priced and compiled first), through the handler; the cold
// explain of bench/run-serve.sh without the network.
func BenchmarkColdExplain(b *testing.B) {
	cfg := testConfig()
	cfg.Log = io.Discard
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	colls := []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		body := fmt.Sprintf(`{"node":"h100","nodes":2,"coll":"%s","pipe_ops":%d,"bytes":65536}`, colls[i%5], i/5%65536+1)
		req := httptest.NewRequest("POST", "/v1/explain", strings.NewReader(body))
		req.Host = "127.0.0.1:7480"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Body.String())
		}
	}
}
