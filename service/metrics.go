package service

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the service's Prometheus metrics, on a registry of their own: collplan_ prefix,
// base units, _total counters, and labels of bounded values only (the endpoint is the route's
// pattern, the code its status class).
type metrics struct {
	reg            *prometheus.Registry
	requests       *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	cacheHits      prometheus.Counter
	cacheMisses    prometheus.Counter
	tunerFallbacks prometheus.Counter
	prepareSeconds prometheus.Histogram
	reloads        *prometheus.CounterVec
	rejected       *prometheus.CounterVec
	decisions      prometheus.Counter
}

// newMetrics registers the metrics; tunerStarts counts the tuner plugins started so far (every
// set's, first starts and restarts).
func newMetrics(tunerStarts func() float64) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "collplan_http_requests_total",
		Help: "HTTP requests answered, by endpoint and status class."}, []string{"endpoint", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "collplan_http_request_duration_seconds",
		Help:    "Time from the request's arrival to its answer, by endpoint.",
		Buckets: []float64{1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1, 3, 10}}, []string{"endpoint"})
	m.cacheHits = prometheus.NewCounter(prometheus.CounterOpts{Name: "collplan_class_cache_hits_total",
		Help: "Queries answered from a class already priced and tuned (the class cache)."})
	m.cacheMisses = prometheus.NewCounter(prometheus.CounterOpts{Name: "collplan_class_cache_misses_total",
		Help: "Queries whose class was priced and sent to the tuner first."})
	m.tunerFallbacks = prometheus.NewCounter(prometheus.CounterOpts{Name: "collplan_tuner_fallbacks_total",
		Help: "Classes answered by the built-in policy because the tuner failed, hung past its deadline or answered garbage."})
	m.prepareSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "collplan_class_prepare_duration_seconds",
		Help:    "Time to price a class and ask the tuner for it.",
		Buckets: []float64{1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10}})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "collplan_reloads_total",
		Help: "Reloads of the tables, topologies and tuners, by result (ok, failed)."}, []string{"result"})
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "collplan_limit_rejections_total",
		Help: "Requests refused by a limit, by limit."}, []string{"limit"})
	m.decisions = prometheus.NewCounter(prometheus.CounterOpts{Name: "collplan_decisions_total",
		Help: "Plans answered (each query of a batch counts)."})
	starts := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "collplan_tuner_starts_total",
		Help: "Tuner plugin processes started: each set's first start of a tuner and every restart after a failure."}, tunerStarts)
	m.reg.MustRegister(starts, m.requests, m.latency, m.cacheHits, m.cacheMisses, m.tunerFallbacks, m.prepareSeconds,
		m.reloads, m.rejected, m.decisions, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
