package report

import (
	"slices"
	"strconv"
)

// AppendJSON appends p as WriteJSON writes it: json.Encoder's output with a two-space indent and a
// trailing newline (TestPlanAppendJSON holds it to that, byte for byte), without reflection or
// the encoder's re-indenting pass, which were two fifths of a cold /v1/explain.
func (p *Plan) AppendJSON(b []byte) []byte {
	w := indented{b: b}
	w.open('{')
	p.Pick.appendFields(&w)
	w.key("env")
	if p.Env == nil {
		w.null()
	} else {
		w.open('{')
		keys := make([]string, 0, len(p.Env))
		for k := range p.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			s := p.Env[k]
			w.mapKey(k)
			w.open('{')
			w.key("value")
			w.str(s.Value)
			w.key("source")
			w.str(s.Source)
			w.close('}')
		}
		w.close('}')
	}
	w.key("tuner")
	w.str(p.Tuner)
	if p.TunerNote != "" {
		w.key("tuner_note")
		w.str(p.TunerNote)
	}
	w.key("edits")
	w.strs(p.Edits)
	w.key("menu")
	if p.Menu == nil {
		w.null()
	} else {
		w.open('[')
		for i := range p.Menu {
			c := &p.Menu[i]
			w.elem()
			w.open('{')
			w.key("algo")
			w.str(c.Algo)
			w.key("proto")
			w.str(c.Proto)
			w.key("lat_us")
			w.f32(c.LatUS)
			w.key("bw_gbps")
			w.f32(c.BWGBps)
			w.key("correction")
			w.f32(c.Correction)
			if c.CorrSource != "" {
				w.key("correction_source")
				w.str(c.CorrSource)
			}
			w.key("model_time_us")
			w.f32(c.ModelTimeUS)
			w.key("time_us")
			w.f32(c.TimeUS)
			w.key("reason")
			w.str(c.Reason)
			if c.Chosen {
				w.key("chosen")
				w.bool(true)
			}
			w.close('}')
		}
		w.close(']')
	}
	w.key("estimated_inputs")
	w.strs(p.Estimated)
	w.key("overlay")
	if o := p.Overlay; o == nil {
		w.null()
	} else {
		w.open('{')
		w.key("file")
		w.str(o.File)
		w.key("embedded")
		w.bool(o.Embedded)
		w.key("applied")
		w.int(int64(o.Applied))
		w.key("skipped")
		if o.Skipped == nil {
			w.null()
		} else {
			w.open('[')
			for _, s := range o.Skipped {
				w.elem()
				w.open('{')
				w.key("cell")
				w.str(s.Cell)
				w.key("reason")
				w.str(s.Reason)
				w.close('}')
			}
			w.close(']')
		}
		w.close('}')
	}
	w.key("fabric")
	if f := p.Fabric; f == nil {
		w.null()
	} else {
		w.open('{')
		w.key("name")
		w.str(f.Name)
		w.key("file")
		w.str(f.File)
		w.key("applied")
		w.bool(f.Applied)
		w.close('}')
	}
	w.key("assumed")
	a := &p.Assumed
	w.open('{')
	w.key("gpus_per_node")
	w.int(int64(a.GPUsPerNode))
	w.key("gpus_per_node_source")
	w.str(a.GPUsPerNodeSource)
	w.key("scale")
	w.str(a.Scale)
	w.key("scale_stands_in")
	w.bool(a.ScaleStandsIn)
	w.key("graphs")
	w.str(a.Graphs)
	w.close('}')
	w.close('}')
	return append(w.b, '\n')
}

// appendFields writes the members of a Pick into the open object of w (Decision.AppendJSON writes
// the same members compact, by hand).
func (p *Pick) appendFields(w *indented) {
	w.key("query")
	p.Query.appendFields(w)
	w.key("algo")
	w.str(p.Algo)
	w.key("proto")
	w.str(p.Proto)
	w.key("time_us")
	w.f32(p.TimeUS)
	w.key("forced")
	w.bool(p.Forced)
	if p.ForcedBy != "" {
		w.key("forced_by")
		w.str(p.ForcedBy)
	}
	w.key("channels")
	w.int(int64(p.Channels))
	w.key("threads")
	w.int(int64(p.Threads))
	w.key("warps")
	w.int(int64(p.Warps))
	w.key("chunk_bytes")
	w.int(p.ChunkBytes)
	w.key("slice_bytes")
	w.int(p.SliceBytes)
}

// appendFields writes q as an object.
func (q *Query) appendFields(w *indented) {
	w.open('{')
	w.key("topology")
	w.str(q.Topology)
	w.key("n_nodes")
	w.int(int64(q.NNodes))
	w.key("n_ranks")
	w.int(int64(q.NRanks))
	w.key("coll")
	w.str(q.Coll)
	w.key("bytes")
	w.int(q.Bytes)
	w.key("op")
	w.str(q.Op)
	w.key("dtype")
	w.str(q.Dtype)
	w.key("pipe_ops")
	w.int(int64(q.PipeOps))
	w.key("reg_buff")
	w.bool(q.RegBuff)
	if q.NCCL != "" {
		w.key("nccl")
		w.str(q.NCCL)
	}
	w.close('}')
}

// indented writes JSON as encoding/json indents it with prefix "" and indent "  ": each member or
// element on its own line, an empty object or array as {} or [].
type indented struct {
	b     []byte
	depth int
	count [8]int // members written so far at each open level
}

func (w *indented) newline() {
	w.b = append(w.b, '\n')
	for i := 0; i < w.depth; i++ {
		w.b = append(w.b, "  "...)
	}
}

func (w *indented) open(c byte) {
	w.b = append(w.b, c)
	w.depth++
	w.count[w.depth] = 0
}

func (w *indented) close(c byte) {
	n := w.count[w.depth]
	w.depth--
	if n > 0 {
		w.newline()
	}
	w.b = append(w.b, c)
}

// elem starts the next member or element of the innermost open level.
func (w *indented) elem() {
	if w.count[w.depth] > 0 {
		w.b = append(w.b, ',')
	}
	w.count[w.depth]++
	w.newline()
}

// key starts a member named k, one of this file's constant names: plain ASCII that JSON writes
// as is (mapKey escapes a name that comes from data).
func (w *indented) key(k string) {
	w.elem()
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"')
	w.colon()
}

// mapKey starts a member whose name comes from data (a map key), escaped as encoding/json does.
func (w *indented) mapKey(k string) {
	w.elem()
	w.b = appendString(w.b, k)
	w.colon()
}

func (w *indented) colon() { w.b = append(w.b, ": "...) }

func (w *indented) str(s string) { w.b = appendString(w.b, s) }
func (w *indented) int(v int64)  { w.b = strconv.AppendInt(w.b, v, 10) }
func (w *indented) bool(v bool)  { w.b = strconv.AppendBool(w.b, v) }
func (w *indented) f32(v F32)    { w.b = v.AppendJSON(w.b) }
func (w *indented) null()        { w.b = append(w.b, "null"...) }

func (w *indented) strs(ss []string) {
	if ss == nil {
		w.null()
		return
	}
	w.open('[')
	for _, s := range ss {
		w.elem()
		w.str(s)
	}
	w.close(']')
}
