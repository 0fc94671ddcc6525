package service

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/collplan/collplan/report"
	"github.com/collplan/collplan/tables"
)

// OpenAPI is the service's OpenAPI 3 document, served at /v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

func numCPU() int { return runtime.NumCPU() }

// Server is the planner service. New loads its set; Handler serves it; Reload swaps in a new set.
type Server struct {
	cfg        Config
	token      []byte
	adminToken []byte
	loopback   bool
	metrics    *metrics
	compiles   *limiter

	mu      sync.RWMutex // guards cur
	cur     *set
	gen     atomic.Uint64
	reloads sync.Mutex // one reload at a time
	ready   atomic.Bool
	logMu   sync.Mutex
	// retiredStarts are the tuner starts of the sets already swapped out.
	retiredStarts atomic.Int64
}

// tunerStarts is every set's tuner starts so far, for collplan_tuner_starts_total.
func (s *Server) tunerStarts() float64 {
	s.mu.RLock()
	st := s.cur
	s.mu.RUnlock()
	n := s.retiredStarts.Load()
	if st != nil {
		n += st.starts()
	}
	return float64(n)
}

// New checks cfg and loads the first set: the topology files read, the tuner clients opened (a
// tuner starts on its first call). Every error names the flag or file at fault.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	// A compile turn is waited for at most half the write timeout, so the answer still fits in it.
	s := &Server{cfg: cfg, compiles: newLimiter(cfg.MaxCompiles, cfg.CompileQueue, cfg.WriteTimeout/2)}
	s.metrics = newMetrics(s.tunerStarts)
	var err error
	if s.token, err = readToken("--token-file", cfg.TokenFile); err != nil {
		return nil, err
	}
	if s.adminToken, err = readToken("--admin-token-file", cfg.AdminTokenFile); err != nil {
		return nil, err
	}
	s.loopback, _ = isLoopbackAddr(cfg.Listen)
	st, err := loadSet(&s.cfg, s.gen.Add(1), s.metrics, cfg.Log)
	if err != nil {
		return nil, err
	}
	s.cur = st
	return s, nil
}

// Close ends the current set's tuner plugins.
func (s *Server) Close() {
	s.mu.Lock()
	st := s.cur
	s.mu.Unlock()
	st.refs.Wait()
	st.close()
}

func (s *Server) logf(format string, args ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.cfg.Log, "planner: serve: "+format+"\n", args...)
}

// acquire returns the current set, held until release: a reload never closes a set under a
// request.
func (s *Server) acquire() *set {
	s.mu.RLock()
	st := s.cur
	st.refs.Add(1)
	s.mu.RUnlock()
	return st
}

func (st *set) release() { st.refs.Done() }

// Reload builds a new set from the configuration (the table and topology files read again, the
// tuner plugins started anew and asked for one class) and swaps it in; requests in flight finish on the old one, whose tuners
// close after them. When the new set does not build, the old one stays and the error says why.
func (s *Server) Reload() (uint64, error) {
	s.reloads.Lock()
	defer s.reloads.Unlock()
	st, err := loadSet(&s.cfg, s.gen.Load()+1, s.metrics, s.cfg.Log)
	if err != nil {
		s.metrics.reloads.WithLabelValues("failed").Inc()
		s.logf("reload failed, keeping generation %d: %v", s.gen.Load(), err)
		return s.gen.Load(), err
	}
	// Start the new set's tuners before the swap: a plugin reads its configuration when it
	// starts, so starting it lazily after the swap could read files changed since the reload.
	// Each start and first call is bounded by the tuner's deadlines; one that fails falls back.
	s.warm(st)
	s.gen.Store(st.gen)
	s.mu.Lock()
	old := s.cur
	s.cur = st
	s.retiredStarts.Add(old.starts()) // under mu: tunerStarts never counts old twice or not at all
	s.mu.Unlock()
	old.retire()
	s.metrics.reloads.WithLabelValues("ok").Inc()
	s.logf("reloaded: generation %d", st.gen)
	return st.gen, nil
}

// warm asks every tuner of st for one class, so that /readyz says ready once each has answered
// or fallen back.
func (s *Server) warm(st *set) {
	st.refs.Add(1)
	defer st.refs.Done()
	ctx := context.Background()
	q := Query{Node: tables.Names()[0], Bytes: []byte("1048576")}
	for name := range st.tuners {
		q.Tuner = name
		if r, err := st.resolve(&q, true); err == nil {
			if _, err := st.class(ctx, r, nil); err != nil {
				s.logf("tuner %s: %v", name, err)
			}
		}
	}
	s.ready.Store(true)
}

// route is one endpoint: its method and handler.
type route struct {
	method, pattern string
	h               func(w http.ResponseWriter, r *http.Request) error
	open            bool // served without the token (health checks)
}

// Handler is the service's HTTP handler: every endpoint behind the Host, Origin and token checks
// and the body limit, each counted and timed.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	routes := []route{
		{"POST", "/v1/explain", s.explain, false},
		{"POST", "/v1/plan", s.plan, false},
		{"POST", "/v1/map", s.mapClass, false},
		{"POST", "/v1/compile", s.compile, false},
		{"POST", "/v1/diff", s.diff, false},
		{"POST", "/v1/compare", s.compare, false},
		{"GET", "/v1/tables", s.tablesList, false},
		{"GET", "/v1/tables/{name}", s.table, false},
		{"GET", "/v1/openapi.json", s.openapi, false},
		{"POST", "/v1/admin/reload", s.adminReload, false},
		{"GET", "/metrics", s.metricsPage, false},
		{"GET", "/healthz", s.healthz, true},
		{"GET", "/readyz", s.readyz, true},
	}
	routes = append(routes, s.overlayRoutes()...) // the web map's overlays (overlay_points.go)
	for _, rt := range routes {
		mux.Handle(rt.pattern, s.wrap(rt))
	}
	mux.Handle("/", s.wrap(route{method: "GET", pattern: "/", h: s.root}))
	return mux
}

// statusWriter records the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		err := s.guard(rt, r)
		if err == nil && r.Method != rt.method && !(rt.method == "GET" && r.Method == "HEAD") {
			sw.Header().Set("Allow", rt.method)
			err = &apiError{status: http.StatusMethodNotAllowed, msg: fmt.Sprintf("%s %s: method not allowed (use %s)", r.Method, r.URL.Path, rt.method)}
		}
		if err == nil {
			r.Body = http.MaxBytesReader(sw, r.Body, s.cfg.MaxBodyBytes)
			err = rt.h(sw, r)
		}
		if err != nil {
			var ae *apiError
			if errors.As(err, &ae) && (ae.status == http.StatusRequestEntityTooLarge || ae.status == http.StatusTooManyRequests) {
				s.metrics.rejected.WithLabelValues(limitName(ae.msg)).Inc()
			}
			s.writeError(sw, r, err)
		}
		code := sw.status
		if code == 0 {
			code = http.StatusOK
		}
		s.metrics.requests.WithLabelValues(rt.pattern, strconv.Itoa(code/100)+"xx").Inc()
		s.metrics.latency.WithLabelValues(rt.pattern).Observe(time.Since(t0).Seconds())
	})
}

// limitName is the limit a 413 or 429 names, for the metric's label (a bounded set).
func limitName(msg string) string {
	for _, l := range []string{"max-body-bytes", "max-batch", "compile-queue"} {
		if strings.Contains(msg, l) {
			return l
		}
	}
	return "other"
}

// guard checks Host and Origin (against DNS rebinding and cross-site requests) and the bearer
// token.
func (s *Server) guard(rt route, r *http.Request) error {
	if n := headerBytes(r); n > s.cfg.MaxHeaderBytes {
		return &apiError{status: http.StatusRequestHeaderFieldsTooLarge, field: "headers",
			msg: fmt.Sprintf("request headers of about %d bytes are over the %d-byte limit (--max-header-bytes)", n, s.cfg.MaxHeaderBytes)}
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if s.loopback && !isLoopbackHost(host) {
		return &apiError{status: http.StatusForbidden, field: "Host",
			msg: fmt.Sprintf("Host %q is not a loopback name: the service listens on loopback and answers only localhost, 127.0.0.1 or [::1]", r.Host)}
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return &apiError{status: http.StatusForbidden, field: "Origin",
				msg: fmt.Sprintf("Origin %q is not this service's origin (%s): cross-origin requests are refused", o, r.Host)}
		}
	}
	if s.token != nil && !rt.open {
		if !bearer(r, s.token) {
			return &apiError{status: http.StatusUnauthorized, field: "Authorization", msg: "missing or wrong bearer token (Authorization: Bearer TOKEN)"}
		}
	}
	return nil
}

// headerBytes is the size of r's request line and header block as it came (give or take the
// whitespace around values): what --max-header-bytes limits.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2 + len("Host: ") + len(r.Host) + 2 + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// headerSlack is how far past --max-header-bytes Go's HTTP server reads a header block before it
// gives up with its own plain-text 431 and closes the connection; up to there the service reads
// the headers and answers its JSON 431 naming the limit (guard).
const headerSlack = 64 << 10

// bearer says whether r carries "Authorization: Bearer want", compared in constant time.
func bearer(r *http.Request, want []byte) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), want) == 1
}

// readBody reads the whole body within the limit.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, decodeError(err)
		}
		return nil, badRequest("", "reading the request body: %v", err)
	}
	return b, nil
}

// Batch is the answer to a batch: the set generation that answered every query of it, and one
// result per query, in order.
type Batch[T any] struct {
	Generation uint64 `json:"generation"`
	Results    []T    `json:"results"`
}

// answer runs the queries of an explain or plan body on one set.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, full bool) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	qs, batch, ae := queries(body, s.cfg.MaxBatch)
	if ae != nil {
		return ae
	}
	st := s.acquire()
	defer st.release()
	plans := make([]*report.Plan, len(qs))      // explain only
	answers := make([]report.Decision, len(qs)) // plan only
	policies := make([]string, len(qs))
	failed := map[string]string{} // tuner -> why, for the tuners that failed for a query of the batch
	var m memo
	for i := range qs {
		note, pol, err := s.one(r.Context(), st, &qs[i], false, full, &plans[i], &answers[i], &m)
		if err != nil {
			if batch {
				var ae *apiError
				if errors.As(err, &ae) {
					return inField(fmt.Sprintf("[%d]", i), ae)
				}
			}
			return err
		}
		policies[i] = pol
		if t := tunerOf(&qs[i]); t != "" && pol == report.BuiltinPolicy {
			if _, ok := failed[t]; !ok {
				failed[t] = note
			}
		}
	}
	// One policy per tuner per batch: when a tuner failed for one of its queries, the batch's other
	// queries naming it are the built-in policy's too, and say why.
	for i := range qs {
		t := tunerOf(&qs[i])
		why, ok := failed[t]
		if !ok || policies[i] == report.BuiltinPolicy {
			continue
		}
		var m memo
		_, pol, err := s.one(r.Context(), st, &qs[i], true, full, &plans[i], &answers[i], &m)
		if err != nil {
			return inField(fmt.Sprintf("[%d]", i), &apiError{status: http.StatusBadRequest, msg: err.Error()})
		}
		note := fmt.Sprintf("tuner %s failed for another query of this batch, so the built-in policy answers all of its queries here (%s)", t, why)
		if full {
			plans[i].Tuner, plans[i].TunerNote = t, note
		} else {
			answers[i].Tuner, answers[i].TunerNote = t, note
		}
		policies[i] = pol
	}
	policy := policies[len(policies)-1]
	s.metrics.decisions.Add(float64(len(qs)))
	w.Header().Set("Collplan-Generation", strconv.FormatUint(st.gen, 10))
	switch {
	case batch && full:
		writeJSON(w, http.StatusOK, Batch[*report.Plan]{Generation: st.gen, Results: plans})
	case batch:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(appendAnswers(make([]byte, 0, 400*len(answers)), st.gen, answers), '\n'))
	case full:
		w.Header().Set("Collplan-Policy", policy)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(plans[0].AppendJSON(make([]byte, 0, 8192)))
	default:
		w.Header().Set("Collplan-Policy", policy)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(answers[0].AppendJSON(make([]byte, 0, 512)), '\n'))
	}
	return nil
}

// tunerOf is the tuner a query names ("" for none).
func tunerOf(q *Query) string {
	if strings.EqualFold(q.Tuner, "none") {
		return ""
	}
	return q.Tuner
}

// memo is the last class a batch's query used: a run of queries of one class skips the caches.
type memo struct {
	key classKey
	c   *class
}

// one answers one query on st (builtin: without its tuner): explain's report into *plan (full)
// or plan's answer into *ans; it returns the tuner's note and the policy that made the answer.
func (s *Server) one(ctx context.Context, st *set, q *Query, builtin, full bool, plan **report.Plan, ans *report.Decision, m *memo) (string, string, error) {
	res, ae := st.resolve(q, true)
	if ae != nil {
		return "", "", ae
	}
	if builtin {
		res.tuner = ""
	}
	c := m.c
	if k := (classKey{res.key(), res.cls}); c == nil || k != m.key {
		var err error
		if c, err = st.class(ctx, res, s.compiles); err != nil {
			return "", "", err
		}
		m.key, m.c = k, c
		if c.policy == report.BuiltinPolicy && res.tuner != "" {
			m.c = nil // a fallback is not cached: the next query asks the tuner again
		}
	} else {
		st.metrics.cacheHits.Inc()
	}
	if full {
		p, err := c.pr.Explain(res.bytes)
		if err != nil {
			return "", "", &apiError{status: http.StatusBadRequest, msg: err.Error()}
		}
		*plan = report.NewPlan(c.b.setup, p)
		return p.Explain.TunerNote, c.policy, nil
	}
	p, err := c.pr.Pick(res.bytes)
	if err != nil {
		return "", "", &apiError{status: http.StatusBadRequest, msg: err.Error()}
	}
	*ans = report.NewDecision(c.b.setup, c.pr, res.bytes, p)
	_, note := c.pr.Tuner()
	return note, c.policy, nil
}

func (s *Server) explain(w http.ResponseWriter, r *http.Request) error { return s.answer(w, r, true) }
func (s *Server) plan(w http.ResponseWriter, r *http.Request) error    { return s.answer(w, r, false) }

// TableList is GET /v1/tables: the embedded node tables (as planner tables --json lists them),
// the fabric tables, and the topologies and tuners the service was started with.
type TableList struct {
	Tables     []report.Table `json:"tables"`
	Fabrics    []string       `json:"fabrics"`
	Topologies []string       `json:"topologies"`
	Tuners     []string       `json:"tuners"`
	Generation uint64         `json:"generation"`
}

func (s *Server) tablesList(w http.ResponseWriter, r *http.Request) error {
	st := s.acquire()
	defer st.release()
	out := TableList{Tables: []report.Table{}, Fabrics: tables.FabricNames(), Topologies: []string{}, Tuners: []string{}, Generation: st.gen}
	for _, name := range tables.Names() {
		n, err := tables.Load(name)
		if err != nil {
			return err
		}
		out.Tables = append(out.Tables, report.NewTable(n))
	}
	for _, name := range slices.Sorted(maps.Keys(st.tables)) {
		out.Tables = append(out.Tables, report.NewTable(st.tables[name].full))
	}
	for name := range st.topologies {
		out.Topologies = append(out.Topologies, name)
	}
	for name := range st.tuners {
		out.Tuners = append(out.Tuners, name)
	}
	slices.Sort(out.Topologies)
	slices.Sort(out.Tuners)
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) table(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	st := s.acquire()
	defer st.release()
	tf, isFile := st.tables[name]
	if !isTable(name) && !isFile {
		return &apiError{status: http.StatusNotFound, field: "name", msg: fmt.Sprintf("unknown node table %q (GET /v1/tables lists them)", name)}
	}
	n := tf.full
	if !isFile {
		var err error
		if n, err = tables.Load(name); err != nil {
			return err
		}
	}
	if f := r.URL.Query().Get("fabric"); f != "" {
		var err error
		if !isFabric(f) {
			return badRequest("fabric", "unknown fabric table %q (GET /v1/tables lists them)", f)
		}
		if n, _, err = report.WithFabric(n, f); err != nil {
			return badRequest("fabric", "%v", err)
		}
	}
	writeJSON(w, http.StatusOK, report.NewTableDetail(n))
	return nil
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(OpenAPI)
	return nil
}

func (s *Server) metricsPage(w http.ResponseWriter, r *http.Request) error {
	promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}

// Health is /healthz's and /readyz's answer.
type Health struct {
	Status     string `json:"status"`
	Generation uint64 `json:"generation"`
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, Health{Status: "ok", Generation: s.gen.Load()})
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	if !s.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "starting: tuners not yet answered", Generation: s.gen.Load()})
		return nil
	}
	writeJSON(w, http.StatusOK, Health{Status: "ready", Generation: s.gen.Load()})
	return nil
}

// Reloaded is POST /v1/admin/reload's answer.
type Reloaded struct {
	Generation uint64 `json:"generation"`
}

func (s *Server) adminReload(w http.ResponseWriter, r *http.Request) error {
	if s.adminToken == nil {
		return &apiError{status: http.StatusNotFound, msg: "admin endpoints are off: start the service with --admin-token-file"}
	}
	got, _ := strings.CutPrefix(r.Header.Get("Collplan-Admin-Token"), "")
	if subtle.ConstantTimeCompare([]byte(got), s.adminToken) != 1 {
		return &apiError{status: http.StatusUnauthorized, field: "Collplan-Admin-Token", msg: "missing or wrong admin token (Collplan-Admin-Token header)"}
	}
	gen, err := s.Reload()
	if err != nil {
		return &apiError{status: http.StatusConflict, msg: fmt.Sprintf("reload failed, generation %d stays: %v", gen, err)}
	}
	writeJSON(w, http.StatusOK, Reloaded{Generation: gen})
	return nil
}

func (s *Server) root(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Assets == nil || strings.HasPrefix(r.URL.Path, "/v1/") {
		return &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("no endpoint %s (GET /v1/openapi.json lists them)", r.URL.Path)}
	}
	http.FileServerFS(s.cfg.Assets).ServeHTTP(w, r)
	return nil
}

// Serve answers on ln until ctx ends, then drains: requests in flight get DrainTimeout to finish.
// It warms the tuners first (/readyz).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: s.cfg.ReadHeaderTimeout, ReadTimeout: s.cfg.ReadTimeout,
		WriteTimeout: s.cfg.WriteTimeout, IdleTimeout: s.cfg.IdleTimeout, MaxHeaderBytes: s.cfg.MaxHeaderBytes + headerSlack,
		ErrorLog: log.New(s.cfg.Log, "planner serve: ", 0)} // TLS handshake failures and the like
	s.mu.RLock()
	go s.warm(s.cur)
	s.mu.RUnlock()
	errc := make(chan error, 1)
	go func() {
		if s.cfg.TLSCert != "" {
			errc <- hs.ServeTLS(ln, s.cfg.TLSCert, s.cfg.TLSKey)
			return
		}
		errc <- hs.Serve(ln)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	dctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	if err := hs.Shutdown(dctx); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}

// Listen opens the configured address.
func (s *Server) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	return ln, nil
}
