package capabilities

import (
	"fmt"
	"strings"
)

// Legality is what of reference §5's enable rules differs in an older NCCL release (reference §14).
// The zero value is NCCL 2.30.7's rules; costmodel.Rules.Legality fills it for a release.
type Legality struct {
	// FlatEnvLists (<= 2.23): NCCL_ALGO and NCCL_PROTO are one flat list for every function,
	// ["^"] elem {"," elem}, matched case-insensitively; unknown tokens are ignored, not errors
	// (reference §7 and §14 "NCCL_ALGO/NCCL_PROTO").
	FlatEnvLists bool
	// NoPAT (<= 2.22): NCCL does not know the PAT algorithm, so a flat NCCL_ALGO ignores "PAT".
	NoPAT bool
	// LL128SameCompCap (<= 2.29): the LL128 auto gate needs min == max compute capability; 2.30
	// also lets mixed ones through when min >= 90 (reference §14 "LL128 mixed compute
	// capability").
	LL128SameCompCap bool
	// LL128CompCaps, when not nil, are the only compute capabilities the LL128 auto gate passes
	// (70, 80, 90 through 2.24; 100 and 120 added in 2.25); nil is 2.30's min >= 70.
	LL128CompCaps []int
}

// ParseFlatEnableList parses an NCCL_ALGO or NCCL_PROTO value as NCCL 2.23 and older do (tuning.cc
// parseList, reference §14): a leading "^" sets every element to 1 and zeroes the listed ones,
// otherwise every element is 0 and the listed ones 1; tokens are split on "," (empty ones
// skipped), compared case-insensitively and without trimming to names, and ignored when none
// matches. The row applies to every function. It never fails.
func ParseFlatEnableList(names []string, s string) []int8 {
	var set, def int8 = 1, 0
	if strings.HasPrefix(s, "^") {
		set, def = 0, 1
		s = s[1:]
	}
	row := make([]int8, len(names))
	for i := range row {
		row[i] = def
	}
	for _, tok := range strings.Split(s, ",") {
		for i, n := range names {
			if tok != "" && strings.EqualFold(tok, n) {
				row[i] = set
			}
		}
	}
	return row
}

// envMatrices parses the topology's NCCL_ALGO and NCCL_PROTO by the release's grammar.
func envMatrices(t *Topology, l Legality) (AlgoMatrix, ProtoMatrix, error) {
	algoM, protoM := DefaultAlgoMatrix(), DefaultProtoMatrix()
	if l.FlatEnvLists {
		names := algoEnvNames[:]
		if l.NoPAT {
			names = algoEnvNames[:PAT]
		}
		if s := t.Env.Algo; s.IsSet() && strings.TrimSpace(s.Value) != "" {
			row := ParseFlatEnableList(names, s.Value)
			for c := range algoM {
				copy(algoM[c][:], row)
			}
		}
		if s := t.Env.Proto; s.IsSet() && strings.TrimSpace(s.Value) != "" {
			row := ParseFlatEnableList(protoEnvNames[:], s.Value)
			for c := range protoM {
				copy(protoM[c][:], row)
			}
		}
		return algoM, protoM, nil
	}
	if s := t.Env.Algo; s.IsSet() {
		var err error
		if algoM, err = ParseAlgoEnv(s.Value); err != nil {
			return algoM, protoM, fmt.Errorf("%w (set by %s)", err, s.Source)
		}
	}
	if s := t.Env.Proto; s.IsSet() {
		var err error
		if protoM, err = ParseProtoEnv(s.Value); err != nil {
			return algoM, protoM, fmt.Errorf("%w (set by %s)", err, s.Source)
		}
	}
	return algoM, protoM, nil
}
