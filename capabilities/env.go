package capabilities

import (
	"fmt"
	"os"
	"strings"
)

// AlgoMatrix is NCCL's algoEnable[func][algo]: 1 enabled, 0 disabled.
type AlgoMatrix [NumColls][NumAlgos]int8

// ProtoMatrix is NCCL's protoEnable[func][proto]: 1 enabled, 0 disabled, 2 auto (LL128's default,
// resolved later by the LL128 hardware gate of reference/nccl-costmodel.md §5). A 1 set by the user
// skips that gate.
type ProtoMatrix [NumColls][NumProtos]int8

// ProtoAuto is the "auto" value of a ProtoMatrix entry (LL128's default).
const ProtoAuto int8 = 2

// DefaultAlgoMatrix returns the matrix NCCL starts from: every algorithm enabled for every function.
func DefaultAlgoMatrix() AlgoMatrix {
	var m AlgoMatrix
	for c := range m {
		for a := range m[c] {
			m[c][a] = 1
		}
	}
	return m
}

// DefaultProtoMatrix returns the matrix NCCL starts from: LL 1, LL128 2 (auto), Simple 1 for every
// function.
func DefaultProtoMatrix() ProtoMatrix {
	var m ProtoMatrix
	for c := range m {
		m[c] = [NumProtos]int8{LL: 1, LL128: ProtoAuto, Simple: 1}
	}
	return m
}

// ParseAlgoEnv parses an NCCL_ALGO value with the grammar of reference/nccl-costmodel.md §7 (NCCL
// 2.24+) and returns the enable matrix before NCCL's forced disables. An empty or all-space value
// means unset and gives DefaultAlgoMatrix. Element names are NCCL_ALGO's (Tree Ring CollNetDirect
// CollNetChain NVLS NVLSTree PAT, case-insensitive); the log names (COLLNET_DIRECT, NVLS_TREE) are
// not accepted, as NCCL does not accept them. On error the matrix is DefaultAlgoMatrix.
func ParseAlgoEnv(s string) (AlgoMatrix, error) {
	m := DefaultAlgoMatrix()
	rows := make([][]int8, NumColls)
	for c := range m {
		rows[c] = m[c][:]
	}
	err := parseEnableList("NCCL_ALGO", "algorithm", algoEnvNames[:], s, rows)
	if err != nil {
		return DefaultAlgoMatrix(), err
	}
	return m, nil
}

// ParseProtoEnv parses an NCCL_PROTO value with the grammar of reference/nccl-costmodel.md §7 (NCCL
// 2.24+) and returns the enable matrix before the LL128 auto rule. An empty or all-space value means
// unset and gives DefaultProtoMatrix. Element names are LL, LL128 and Simple (case-insensitive). On
// error the matrix is DefaultProtoMatrix.
//
// Every targeted row is reset, so an LL128 that the value names (plain list) or does not exclude
// (^ list) becomes 1, user-enabled, which skips the LL128 hardware gate: "^LL" force-enables LL128.
func ParseProtoEnv(s string) (ProtoMatrix, error) {
	m := DefaultProtoMatrix()
	rows := make([][]int8, NumColls)
	for c := range m {
		rows[c] = m[c][:]
	}
	err := parseEnableList("NCCL_PROTO", "protocol", protoEnvNames[:], s, rows)
	if err != nil {
		return DefaultProtoMatrix(), err
	}
	return m, nil
}

// parseEnableList applies s to rows (one row per function, one column per element of names).
//
// Grammar: [list] { ";" func ":" list }, list = ["^"] elem {"," elem}. Only the first ;-token may
// omit "func:", and then it targets every function. Each targeted row is reset: a plain list zeroes
// the row and sets the listed elements to 1; a ^ list sets the row to 1 and zeroes the listed ones.
// Unlike NCCL's strtok-based parser, empty tokens, lists and elements are errors here rather than
// silently skipped, and whitespace around tokens is trimmed.
func parseEnableList(varName, kind string, names []string, s string, rows [][]int8) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	for i, raw := range strings.Split(s, ";") {
		tok := strings.TrimSpace(raw)
		if tok == "" {
			return fmt.Errorf("%s: empty token %d (between \";\") in %q", varName, i+1, s)
		}
		targets := make([]int, 0, NumColls)
		list := tok
		if prefix, rest, ok := strings.Cut(tok, ":"); ok {
			prefix = strings.TrimSpace(prefix)
			c := -1
			for k, name := range collNames {
				if strings.EqualFold(prefix, name) {
					c = k
					break
				}
			}
			if c < 0 {
				return fmt.Errorf("%s: unknown function %q in %q (want Broadcast, Reduce, AllGather, ReduceScatter or AllReduce)", varName, prefix, s)
			}
			targets = append(targets, c)
			list = strings.TrimSpace(rest)
		} else {
			if i > 0 {
				return fmt.Errorf("%s: token %q has no function prefix (only the first token may omit it) in %q", varName, tok, s)
			}
			for c := 0; c < NumColls; c++ {
				targets = append(targets, c)
			}
		}

		var set, unset int8 = 1, 0
		if strings.HasPrefix(list, "^") {
			set, unset = 0, 1
			list = strings.TrimSpace(list[1:])
		}
		if list == "" {
			return fmt.Errorf("%s: empty %s list in token %q of %q", varName, kind, tok, s)
		}
		var listed []int
		for _, e := range strings.Split(list, ",") {
			e = strings.TrimSpace(e)
			if e == "" {
				return fmt.Errorf("%s: empty %s name in list %q of %q", varName, kind, list, s)
			}
			idx := -1
			for k, name := range names {
				if strings.EqualFold(e, name) {
					idx = k
					break
				}
			}
			if idx < 0 {
				return fmt.Errorf("%s: unknown %s %q in %q (want %s)", varName, kind, e, s, strings.Join(names, ", "))
			}
			listed = append(listed, idx)
		}
		for _, c := range targets {
			for k := range rows[c] {
				rows[c][k] = unset
			}
			for _, k := range listed {
				rows[c][k] = set
			}
		}
	}
	return nil
}

// EnvFromProcess reads every variable of EnvVars through lookup (os.LookupEnv when nil) and returns
// an Env whose present variables have Source SourceProcess; absent ones stay unset. A variable set
// to the empty string is present.
func EnvFromProcess(lookup func(string) (string, bool)) Env {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var env Env
	for _, name := range EnvVars {
		if v, ok := lookup(name); ok {
			*env.Var(name) = Setting{Value: v, Source: SourceProcess}
		}
	}
	return env
}
