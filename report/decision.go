package report

import (
	"encoding/json"
	"strconv"

	"github.com/collplan/collplan/planner"
)

// BuiltinPolicy is the policy of a decision the planner's built-in policy made: there is no
// tuner, or it failed for the decision's class (its note says why).
const BuiltinPolicy = "builtin"

// PolicyOf names the policy whose answer pr plans with: the tuner's name when it answered for
// the class, else BuiltinPolicy.
func PolicyOf(pr *planner.Prepared) string {
	if name, _ := pr.Tuner(); name != "" && pr.TunerErr() == nil {
		return name
	}
	return BuiltinPolicy
}

// Decision is a plan without its explanation: the keys of Plan up to slice_bytes, the tuner and
// its note, and the policy that made it. It is what /v1/plan answers and what `planner explain
// --json --decision` prints (the same bytes).
type Decision struct {
	Pick
	Tuner     string `json:"tuner"`
	TunerNote string `json:"tuner_note,omitempty"`
	Policy    string `json:"policy"`
}

// NewDecision is the Decision of pick p of pr at nBytes on setup su.
func NewDecision(su *Setup, pr *planner.Prepared, nBytes int64, p planner.Pick) Decision {
	tuner, note := pr.Tuner()
	if tuner == "" {
		tuner = "none"
	}
	return Decision{Pick: newPick(su, &pr.Menu().Class, nBytes, p.Decision, p.TimeUS, p.Forced),
		Tuner: tuner, TunerNote: note, Policy: PolicyOf(pr)}
}

// AppendJSON appends a's JSON as json.Marshal writes it (the same keys, order, omissions and
// escapes; TestDecisionAppendJSON holds it to that), without reflection: a service's batch hot
// path, written out rather than through Plan's indented writer, which costs twice as much per
// answer (BenchmarkDecisionAppendJSON).
func (a *Decision) AppendJSON(b []byte) []byte {
	q := &a.Query
	b = append(b, `{"query":{"topology":`...)
	b = appendString(b, q.Topology)
	b = append(b, `,"n_nodes":`...)
	b = strconv.AppendInt(b, int64(q.NNodes), 10)
	b = append(b, `,"n_ranks":`...)
	b = strconv.AppendInt(b, int64(q.NRanks), 10)
	b = append(b, `,"coll":`...)
	b = appendString(b, q.Coll)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, q.Bytes, 10)
	b = append(b, `,"op":`...)
	b = appendString(b, q.Op)
	b = append(b, `,"dtype":`...)
	b = appendString(b, q.Dtype)
	b = append(b, `,"pipe_ops":`...)
	b = strconv.AppendInt(b, int64(q.PipeOps), 10)
	b = append(b, `,"reg_buff":`...)
	b = strconv.AppendBool(b, q.RegBuff)
	if q.NCCL != "" {
		b = append(b, `,"nccl":`...)
		b = appendString(b, q.NCCL)
	}
	b = append(b, `},"algo":`...)
	b = appendString(b, a.Algo)
	b = append(b, `,"proto":`...)
	b = appendString(b, a.Proto)
	b = append(b, `,"time_us":`...)
	b = a.TimeUS.AppendJSON(b)
	b = append(b, `,"forced":`...)
	b = strconv.AppendBool(b, a.Forced)
	if a.ForcedBy != "" {
		b = append(b, `,"forced_by":`...)
		b = appendString(b, a.ForcedBy)
	}
	b = append(b, `,"channels":`...)
	b = strconv.AppendInt(b, int64(a.Channels), 10)
	b = append(b, `,"threads":`...)
	b = strconv.AppendInt(b, int64(a.Threads), 10)
	b = append(b, `,"warps":`...)
	b = strconv.AppendInt(b, int64(a.Warps), 10)
	b = append(b, `,"chunk_bytes":`...)
	b = strconv.AppendInt(b, a.ChunkBytes, 10)
	b = append(b, `,"slice_bytes":`...)
	b = strconv.AppendInt(b, a.SliceBytes, 10)
	b = append(b, `,"tuner":`...)
	b = appendString(b, a.Tuner)
	if a.TunerNote != "" {
		b = append(b, `,"tuner_note":`...)
		b = appendString(b, a.TunerNote)
	}
	b = append(b, `,"policy":`...)
	b = appendString(b, a.Policy)
	return append(b, '}')
}

// appendString appends s quoted as encoding/json quotes it: printable ASCII other than the quote,
// the backslash and json's HTML escapes goes as is; anything else through json.Marshal.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
