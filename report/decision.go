package report

import (
	"encoding/json"

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
// path.
func (a *Decision) AppendJSON(b []byte) []byte {
	w := indented{b: b, compact: true}
	w.open('{')
	a.Pick.appendFields(&w)
	w.key("tuner")
	w.str(a.Tuner)
	if a.TunerNote != "" {
		w.key("tuner_note")
		w.str(a.TunerNote)
	}
	w.key("policy")
	w.str(a.Policy)
	w.close('}')
	return w.b
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
