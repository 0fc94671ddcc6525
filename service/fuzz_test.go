package service

import (
	"testing"
)

// FuzzDecodeRequest feeds arbitrary bodies to the request decoders of explain, plan and map and
// to the query checks: never a panic, and every refusal a 4xx with a message.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"node":"h100","bytes":"1MiB"}`,
		`[{"node":"h100","bytes":8},{"topology":"s1","coll":"allgather","bytes":"64M","algo":"ring","proto":"^ll"}]`,
		`{"node":"h200","nodes":4096,"gpus_per_node":4,"fabric":"ib-ndr","no_overlay":true,"pipe_ops":3,"reg_buff":true,"bytes":1e3}`,
		`{"node":"h100","min":"1K","max":"1G","node_counts":[1,2,3]}`,
		`{"bytes":"-1"}`, `[]`, `[[]]`, `{"nodes":"x"}`, `nul`, `{"bytes":9223372036854775807}`,
	} {
		f.Add([]byte(s))
	}
	cfg := testConfig()
	s, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	st := s.cur
	check := func(t *testing.T, ae *apiError) {
		if ae != nil && (ae.status < 400 || ae.status > 499 || ae.msg == "") {
			t.Fatalf("refusal %d %q: want a 4xx with a message", ae.status, ae.msg)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		qs, _, ae := queries(body, 5)
		check(t, ae)
		for i := range qs {
			_, ae := st.resolve(&qs[i], true)
			check(t, ae)
		}
		var m MapRequest
		if ae := decodeJSON(bytesReader(body), &m); ae == nil {
			_, ae := st.resolve(&m.Query, false)
			check(t, ae)
			if len(m.Min) > 0 {
				_, ae := parseSize("min", m.Min, 1)
				check(t, ae)
			}
		} else {
			check(t, ae)
		}
	})
}
