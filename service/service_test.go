package service

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/report"
)

const topoDir = "../capabilities/testdata/topology/"

// testConfig is a loopback service with the §13 topologies and small limits.
func testConfig() Config {
	return Config{Listen: "127.0.0.1:7480", Topologies: []string{topoDir + "s1.toml", topoDir + "s2.toml", topoDir + "s3.toml"},
		MaxBatch: 5, MaxBodyBytes: 64 << 10, Log: io.Discard}
}

func newTestServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// apiDoc is the OpenAPI document, loaded and validated once, and its router.
var apiDoc struct {
	doc    *openapi3.T
	router routers.Router
}

func openAPIRouter(t *testing.T) routers.Router {
	t.Helper()
	if apiDoc.router != nil {
		return apiDoc.router
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()), "openapi.json is not a valid OpenAPI 3 document")
	r, err := legacy.NewRouter(doc)
	require.NoError(t, err)
	apiDoc.doc, apiDoc.router = doc, r
	return r
}

// validate checks one answer against the OpenAPI document: its route, status and body.
func validate(t *testing.T, req *http.Request, status int, header http.Header, body []byte) error {
	t.Helper()
	router := openAPIRouter(t)
	u := *req.URL
	u.Scheme, u.Host = "http", "127.0.0.1:7480"
	vreq := req.Clone(context.Background())
	vreq.URL = &u
	route, params, err := router.FindRoute(vreq)
	if err != nil {
		return err
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	return openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: header, Body: io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true}})
}

// call sends one request to the handler from loopback and checks its answer against the OpenAPI
// document.
func call(t *testing.T, h http.Handler, method, path, body string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Host = "127.0.0.1:7480"
	req.RemoteAddr = "127.0.0.1:40000"
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if path != "/metrics" && path != "/" && !(rec.Code == 404 && !strings.HasPrefix(path, "/v1/tables")) && rec.Code != 405 {
		assert.NoError(t, validate(t, req, rec.Code, rec.Header(), rec.Body.Bytes()), "%s %s -> %d %s", method, path, rec.Code, rec.Body.String())
	}
	return rec
}

type badCase struct {
	Name   string `json:"name"`
	Method string `json:"method"`
	Path   string `json:"path"`
	Body   string `json:"body"`
	Host   string `json:"host"`
	Origin string `json:"origin"`
	Status int    `json:"status"`
	Field  string `json:"field"`
	Error  string `json:"error"`
}

// TestBadInput sends every case of testdata/requests.json: one JSON error object with the right
// status, naming the field, never a 500.
func TestBadInput(t *testing.T) {
	data, err := os.ReadFile("testdata/requests.json")
	require.NoError(t, err)
	var cases []badCase
	require.NoError(t, json.Unmarshal(data, &cases))
	require.NotEmpty(t, cases)
	h := newTestServer(t, testConfig()).Handler()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			body := tc.Body
			switch {
			case strings.HasPrefix(body, "BATCH:"):
				n := mustAtoi(t, strings.TrimPrefix(body, "BATCH:"))
				body = "[" + strings.TrimSuffix(strings.Repeat(`{"node":"h100","bytes":8},`, n), ",") + "]"
			case strings.HasPrefix(body, "BIG:"):
				n := mustAtoi(t, strings.TrimPrefix(body, "BIG:"))
				body = `{"node":"h100","bytes":8,"coll":"` + strings.Repeat("x", n) + `"}`
			}
			hdr := map[string]string{}
			if tc.Host != "" {
				hdr["Host"] = tc.Host
			}
			if tc.Origin != "" {
				hdr["Origin"] = tc.Origin
			}
			rec := call(t, h, tc.Method, tc.Path, body, hdr)
			assert.Equal(t, tc.Status, rec.Code, rec.Body.String())
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			var e map[string]any
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), rec.Body.String())
			assert.Contains(t, e["error"], tc.Error)
			if tc.Field != "" {
				assert.Equal(t, tc.Field, e["field"], rec.Body.String())
			}
			for k := range e {
				assert.Contains(t, []string{"error", "field"}, k, "one error object, no other keys")
			}
		})
	}
}

func mustAtoi(t *testing.T, s string) int {
	var n int
	require.NoError(t, json.Unmarshal([]byte(s), &n))
	return n
}

// TestEndpoints checks each endpoint's good answer: status, shape (the OpenAPI document, in call)
// and the values a hand check gives.
func TestEndpoints(t *testing.T) {
	s := newTestServer(t, testConfig())
	h := s.Handler()

	rec := call(t, h, "GET", "/healthz", "", nil)
	assert.Equal(t, 200, rec.Code)

	rec = call(t, h, "GET", "/v1/tables", "", nil)
	require.Equal(t, 200, rec.Code)
	var list TableList
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &list))
	assert.Equal(t, []string{"s1", "s2", "s3"}, list.Topologies)
	assert.Empty(t, list.Tuners)
	names := []string{}
	for _, tb := range list.Tables {
		names = append(names, tb.Name)
	}
	assert.Contains(t, names, "h100")

	rec = call(t, h, "GET", "/v1/tables/h100", "", nil)
	require.Equal(t, 200, rec.Code)
	var tb map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &tb))
	assert.Equal(t, "h100", tb["name"])
	assert.NotEmpty(t, tb["sources"])
	assert.NotContains(t, tb, "emulation", "real hardware emulates nothing")

	// An emulated node shows what it emulates (tables/cpu.toml's [emulation]).
	rec = call(t, h, "GET", "/v1/tables/cpu", "", nil)
	require.Equal(t, 200, rec.Code)
	tb = nil
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &tb))
	assert.Equal(t, map[string]any{"multicast_switch": true, "nvls_efficiency": 0.8, "reducing_network": true}, tb["emulation"])

	// The H100 acceptance picks (TestH100Picks in cmd/planner: NCCL 2.30 on 8xH100): RING/LL at
	// 1 MiB, NVLS/SIMPLE at 2 MiB.
	rec = call(t, h, "POST", "/v1/plan", `[{"node":"h100","bytes":"1MiB"},{"node":"h100","bytes":"2MiB"}]`, nil)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	var batch Batch[report.Decision]
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &batch))
	require.Len(t, batch.Results, 2)
	assert.Equal(t, "RING/LL", batch.Results[0].Algo+"/"+batch.Results[0].Proto)
	assert.Equal(t, "NVLS/SIMPLE", batch.Results[1].Algo+"/"+batch.Results[1].Proto)
	assert.Equal(t, "builtin", batch.Results[0].Policy)
	assert.EqualValues(t, 1, batch.Generation)

	rec = call(t, h, "POST", "/v1/explain", `{"topology":"s1","bytes":"1M"}`, nil)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Equal(t, "builtin", rec.Header().Get("Collplan-Policy"))

	rec = call(t, h, "POST", "/v1/explain", `[{"topology":"s1","bytes":"1M"},{"topology":"s2","bytes":"1M","coll":"allgather"}]`, nil)
	require.Equal(t, 200, rec.Code, rec.Body.String())

	// The map of h100 at 1 node: RING/LL at 1 MiB, NVLS/SIMPLE at 2 MiB, so one crossover in
	// between, and the bands tile [min, max] with no gap.
	rec = call(t, h, "POST", "/v1/map", `{"node":"h100","min":"1MiB","max":"2MiB","node_counts":[1]}`, nil)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	var m Map
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m))
	require.Len(t, m.Rows, 1)
	bands := m.Rows[0].Bands
	require.NotEmpty(t, bands)
	assert.EqualValues(t, 1<<20, bands[0].Lo)
	assert.EqualValues(t, 2<<20, bands[len(bands)-1].Hi)
	assert.Equal(t, "RING/LL", bands[0].Algo+"/"+bands[0].Proto)
	assert.Equal(t, "NVLS/SIMPLE", bands[len(bands)-1].Algo+"/"+bands[len(bands)-1].Proto)
	for i := 1; i < len(bands); i++ {
		assert.Equal(t, bands[i-1].Hi+1, bands[i].Lo, "bands tile the range")
		assert.NotEqual(t, bands[i-1].Algo+bands[i-1].Proto, bands[i].Algo+bands[i].Proto, "a band boundary is a crossover")
	}

	// The default node counts: 1, 2, 4 ... 4096 and the table's scales.
	rec = call(t, h, "POST", "/v1/map", `{"node":"h100","min":"1K","max":"1M"}`, nil)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m))
	var counts []int
	for _, r := range m.Rows {
		counts = append(counts, r.Nodes)
	}
	for n := 1; n <= 4096; n *= 2 {
		assert.Contains(t, counts, n)
	}

	rec = call(t, h, "POST", "/v1/map", `{"topology":"s3","min":8,"max":"1G"}`, nil)
	require.Equal(t, 200, rec.Code, rec.Body.String())

	rec = call(t, h, "POST", "/v1/compile", `{"topology":"s1","pipe_ops":1,"ranked":2}`, nil)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Equal(t, "1", rec.Header().Get("Collplan-Blocks"), "a topology is one block")
	assert.Equal(t, `attachment; filename="topology.cptt"`, rec.Header().Get("Content-Disposition"))

	rec = call(t, h, "POST", "/v1/diff", `{"a":{"node":"h100"},"b":{"node":"h100","no_overlay":true},"colls":["allreduce"],"node_counts":[1]}`, nil)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	var d map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &d))
	assert.EqualValues(t, 0, d["changed"], "h100 has no overlay: nothing changes without it")
	rec = call(t, h, "POST", "/v1/diff", `{"a":{"node":"h100"},"b":{"node":"h200"},"colls":["allreduce"],"node_counts":[2]}`, nil)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &d))
	assert.EqualValues(t, 1, d["changed"])

	sweeps := map[string]string{}
	for _, f := range []string{"ring_ll.txt", "ring_simple.txt", "nvls_simple.txt"} {
		b, err := os.ReadFile("testdata/sweeps/" + f)
		require.NoError(t, err)
		sweeps[f] = string(b)
	}
	body, err := json.Marshal(map[string]any{"topology": "s1", "sweeps": sweeps})
	require.NoError(t, err)
	rec = call(t, h, "POST", "/v1/compare", string(body), nil)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	var cmp Compared
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &cmp))
	assert.Contains(t, cmp.Report, "verdict: tie", "none against none")

	rec = call(t, h, "GET", "/v1/openapi.json", "", nil)
	require.Equal(t, 200, rec.Code)
	assert.Equal(t, OpenAPI, rec.Body.Bytes())

	rec = call(t, h, "GET", "/metrics", "", nil)
	require.Equal(t, 200, rec.Code)
	assert.Contains(t, rec.Body.String(), `collplan_http_requests_total{code="2xx",endpoint="/v1/plan"} 1`)
	assert.Contains(t, rec.Body.String(), "collplan_class_cache_hits_total")
}

// TestOpenAPIRejectsAWrongAnswer shows the validator at work: answers that break the document
// (a missing required key, a wrong type, an unknown key) fail.
func TestOpenAPIRejectsAWrongAnswer(t *testing.T) {
	h := newTestServer(t, testConfig()).Handler()
	rec := call(t, h, "POST", "/v1/plan", `{"node":"h100","bytes":8}`, nil)
	require.Equal(t, 200, rec.Code)
	req := httptest.NewRequest("POST", "/v1/plan", strings.NewReader(`{"node":"h100","bytes":8}`))
	require.NoError(t, validate(t, req, 200, rec.Header(), rec.Body.Bytes()))
	var good map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &good))
	for name, edit := range map[string]func(m map[string]any){
		"no policy":         func(m map[string]any) { delete(m, "policy") },
		"channels a string": func(m map[string]any) { m["channels"] = "32" },
		"an unknown key":    func(m map[string]any) { m["cost"] = 1 },
	} {
		t.Run(name, func(t *testing.T) {
			m := map[string]any{}
			for k, v := range good {
				m[k] = v
			}
			edit(m)
			b, err := json.Marshal(m)
			require.NoError(t, err)
			req := httptest.NewRequest("POST", "/v1/plan", strings.NewReader(`{"node":"h100","bytes":8}`))
			assert.Error(t, validate(t, req, 200, rec.Header(), b))
		})
	}
	// An error answer must be the error object.
	req = httptest.NewRequest("POST", "/v1/plan", strings.NewReader(`{}`))
	assert.Error(t, validate(t, req, 400, http.Header{"Content-Type": {"application/json"}}, []byte(`{"message":"bad"}`)))
}

// TestNonLoopbackRefused: off loopback the service refuses to start without a token and TLS.
func TestNonLoopbackRefused(t *testing.T) {
	dir := t.TempDir()
	tok := dir + "/token"
	require.NoError(t, os.WriteFile(tok, []byte("0123456789abcdef0123\n"), 0o600))
	for _, tc := range []struct {
		name, listen, token, cert, key, err string
	}{
		{"all interfaces, nothing", "0.0.0.0:7480", "", "", "", "not a loopback address: refusing to start without --token-file and --tls-cert and --tls-key"},
		{"empty host", ":7480", "", "", "", "refusing to start without --token-file"},
		{"a LAN address, token only", "192.0.2.1:7480", tok, "", "", "refusing to start without --tls-cert and --tls-key"},
		{"IPv6 any, TLS only", "[::]:7480", "", dir + "/c.pem", dir + "/k.pem", "refusing to start without --token-file"},
		{"cert without key", "127.0.0.1:7480", "", dir + "/c.pem", "", "--tls-cert and --tls-key go together"},
		{"short token", "127.0.0.1:7480", writeTemp(t, "short"), "", "", "want at least 16"},
		{"bad address", "nohost", "", "", "", "--listen \"nohost\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Listen, cfg.TokenFile, cfg.TLSCert, cfg.TLSKey = tc.listen, tc.token, tc.cert, tc.key
			_, err := New(cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
	cfg := testConfig()
	cfg.Listen, cfg.TokenFile, cfg.TLSCert, cfg.TLSKey = "0.0.0.0:7480", tok, dir+"/c.pem", dir+"/k.pem"
	s, err := New(cfg)
	require.NoError(t, err, "token and TLS given: it starts (the files are read by Serve)")
	s.Close()
}

func writeTemp(t *testing.T, body string) string {
	p := t.TempDir() + "/f"
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// TestToken: with a token configured (on loopback too), every endpoint but the health checks
// needs it, compared exactly.
func TestToken(t *testing.T) {
	cfg := testConfig()
	cfg.TokenFile = writeTemp(t, "s3cret-token-0123456789\n")
	h := newTestServer(t, cfg).Handler()
	for _, tc := range []struct {
		name, auth string
		status     int
	}{
		{"none", "", 401},
		{"wrong", "Bearer s3cret-token-0123456780", 401},
		{"prefix", "Bearer s3cret-token", 401},
		{"longer", "Bearer s3cret-token-0123456789x", 401},
		{"not bearer", "Basic s3cret-token-0123456789", 401},
		{"right", "Bearer s3cret-token-0123456789", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tc.auth != "" {
				hdr["Authorization"] = tc.auth
			}
			rec := call(t, h, "POST", "/v1/plan", `{"node":"h100","bytes":8}`, hdr)
			assert.Equal(t, tc.status, rec.Code, rec.Body.String())
			if tc.status == 401 {
				assert.Contains(t, rec.Body.String(), `"field":"Authorization"`)
			}
		})
	}
	assert.Equal(t, 200, call(t, h, "GET", "/healthz", "", nil).Code, "health checks need no token")
}

// TestAssets: with Config.Assets set, / serves that file system (the web map's place); the API
// keeps its JSON 404s under /v1/.
func TestAssets(t *testing.T) {
	cfg := testConfig()
	cfg.Assets = fstest.MapFS{"index.html": {Data: []byte("<!doctype html><title>map</title>")}}
	h := newTestServer(t, cfg).Handler()
	rec := call(t, h, "GET", "/", "", nil)
	assert.Equal(t, 200, rec.Code)
	assert.Contains(t, rec.Body.String(), "<title>map</title>")
	rec = call(t, h, "GET", "/v1/nothing", "", nil)
	assert.Equal(t, 404, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	rec = call(t, newTestServer(t, testConfig()).Handler(), "GET", "/", "", nil)
	assert.Equal(t, 404, rec.Code, "no assets: no page")
}
