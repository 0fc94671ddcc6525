package service

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func uploadBody(t *testing.T, name, file string) string {
	t.Helper()
	text, err := os.ReadFile(file)
	require.NoError(t, err)
	b, err := json.Marshal(Upload{Name: name, Text: string(text)})
	require.NoError(t, err)
	return string(b)
}

// TestOverlaySweep uploads an nccl-tests output (AllReduce, 1 node of 8 H100s, 8 B to 8 GiB by
// doubling: 31 rows, all valid) and checks the answer against the file as printed: the first row
// is line 26, "8 2 float sum -1 9.60 ... 9.68", the last line 58, "8589934592 ... 24333.9 ...
// 23721.5".
func TestOverlaySweep(t *testing.T) {
	h := newTestServer(t, testConfig()).Handler()
	rec := call(t, h, "POST", "/v1/overlay/sweep", uploadBody(t, "ar.txt", "../calibrate/testdata/sweeps/ar_current_h100_1n8g.txt"), nil)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	var m Measured
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m))
	assert.Equal(t, "ar.txt", m.File)
	require.Len(t, m.Runs, 1)
	r := m.Runs[0]
	assert.Equal(t, "AllReduce", r.Coll)
	assert.Equal(t, "float", r.Dtype)
	assert.Equal(t, "sum", r.Op)
	assert.Equal(t, 1, r.Nodes)
	assert.Equal(t, 8, r.GPUsPerNode)
	assert.Equal(t, 8, r.Ranks)
	assert.Equal(t, "", r.Algo+r.Proto, "a free sweep")
	require.Len(t, r.Points, 31)
	for i, p := range r.Points {
		assert.Equal(t, int64(8)<<i, p.Bytes, "row %d", i)
		assert.True(t, p.OOPValid && p.InPlaceVal, "row %d valid", i)
	}
	assert.Equal(t, MeasuredPoint{Line: 26, Bytes: 8, OOPUS: 9.60, OOPValid: true, InPlaceUS: 9.68, InPlaceVal: true}, r.Points[0])
	assert.Equal(t, MeasuredPoint{Line: 58, Bytes: 8589934592, OOPUS: 24333.9, OOPValid: true, InPlaceUS: 23721.5, InPlaceVal: true}, r.Points[30])
	assert.Empty(t, m.Problems)
}

// TestOverlayTuning uploads an NCCL 2.30 log (mpirun-tagged, 8 ranks from its Init COMPLETE
// line, no nNodes line). Its decision lines, read by hand: 38-39 AllReduce 8 B RING/LL twice, 40
// 4096 RING/LL, 41 65536 RING/LL (split by a second mpirun tag), 42 1 MiB RING/LL, 44 no protocol
// (rejected), 45 2 MiB NVLS/SIMPLE, 46 64 MiB NVLS/SIMPLE, 47 AllGather 8192 B per rank RING/LL,
// 48 AllGather 8 MiB per rank RING/SIMPLE; AllGather's model size is x8 ranks.
func TestOverlayTuning(t *testing.T) {
	h := newTestServer(t, testConfig()).Handler()
	rec := call(t, h, "POST", "/v1/overlay/tuning", uploadBody(t, "t.log", "../calibrate/testdata/tuning/tuning_2.30_h100_tagged.log"), nil)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	var lg Logged
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &lg))
	assert.Equal(t, "2.30.7", lg.NCCLVersion)
	assert.Equal(t, 8, lg.Ranks)
	assert.Equal(t, 0, lg.Nodes, "the log prints no nNodes")
	want := []LoggedDecision{
		{Line: 38, Coll: "AllReduce", Bytes: 8, NBytes: 8, Algo: "RING", Proto: "LL", Count: 2},
		{Line: 40, Coll: "AllReduce", Bytes: 4096, NBytes: 4096, Algo: "RING", Proto: "LL", Count: 1},
		{Line: 41, Coll: "AllReduce", Bytes: 65536, NBytes: 65536, Algo: "RING", Proto: "LL", Count: 1},
		{Line: 42, Coll: "AllReduce", Bytes: 1 << 20, NBytes: 1 << 20, Algo: "RING", Proto: "LL", Count: 1},
		{Line: 45, Coll: "AllReduce", Bytes: 2 << 20, NBytes: 2 << 20, Algo: "NVLS", Proto: "SIMPLE", Count: 1},
		{Line: 46, Coll: "AllReduce", Bytes: 64 << 20, NBytes: 64 << 20, Algo: "NVLS", Proto: "SIMPLE", Count: 1},
		{Line: 47, Coll: "AllGather", Bytes: 8192, NBytes: 8192 * 8, Algo: "RING", Proto: "LL", Count: 1},
		{Line: 48, Coll: "AllGather", Bytes: 8 << 20, NBytes: 64 << 20, Algo: "RING", Proto: "SIMPLE", Count: 1},
	}
	assert.Equal(t, want, lg.Decisions)
	require.Len(t, lg.Problems, 1)
	assert.Equal(t, 44, lg.Problems[0].Line)
}

// TestOverlayBadInput: one JSON error naming the field (or the file and line), the right status.
func TestOverlayBadInput(t *testing.T) {
	h := newTestServer(t, testConfig()).Handler() // max body 64 KiB
	cases := []struct {
		name, path, method, body string
		status                   int
		field, msg               string
	}{
		{"malformed", "/v1/overlay/sweep", "POST", `{"text":`, 400, "", "malformed JSON"},
		{"unknown field", "/v1/overlay/sweep", "POST", `{"text":"x","path":"/etc/passwd"}`, 400, "path", `unknown field "path"`},
		{"wrong type", "/v1/overlay/tuning", "POST", `{"text":5}`, 400, "text", "want a JSON string"},
		{"empty body", "/v1/overlay/sweep", "POST", ``, 400, "", "empty request body"},
		{"empty text", "/v1/overlay/sweep", "POST", `{"name":"a.txt","text":"  \n"}`, 400, "text", "text is empty"},
		{"no table", "/v1/overlay/sweep", "POST", `{"name":"notes.txt","text":"hello\nworld\n"}`, 400, "text", "notes.txt"},
		{"no decisions", "/v1/overlay/tuning", "POST", `{"name":"x.log","text":"NCCL INFO hello\n"}`, 400, "text", "x.log: no TUNING decision lines"},
		{"name on two lines", "/v1/overlay/sweep", "POST", `{"name":"a\nb","text":"8 2 float sum -1 1 0 0 0 1 0 0 0\n"}`, 400, "name", "one line"},
		{"oversize", "/v1/overlay/sweep", "POST", `{"text":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "", "max-body-bytes"},
		{"wrong method", "/v1/overlay/tuning", "GET", ``, 405, "", "method not allowed"},
		{"cross origin", "/v1/overlay/sweep", "POST", `{"text":"x"}`, 403, "Origin", "cross-origin"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tc.field == "Origin" {
				hdr["Origin"] = "http://evil.example"
			}
			rec := call(t, h, tc.method, tc.path, tc.body, hdr)
			require.Equal(t, tc.status, rec.Code, rec.Body.String())
			var e Error
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), rec.Body.String())
			assert.Equal(t, tc.field, e.Field)
			assert.Contains(t, e.Error, tc.msg)
		})
	}
}
