package capabilities

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestParseFlatEnableList: NCCL 2.23 and older's parseList (reference §14): "^" inverts, tokens
// split on "," with empty ones skipped, names case-insensitive and untrimmed, unknown ignored.
func TestParseFlatEnableList(t *testing.T) {
	names := protoEnvNames[:]
	for _, tc := range []struct {
		in   string
		want []int8
	}{
		{"LL128", []int8{0, 1, 0}},
		{"simple,ll", []int8{1, 0, 1}},
		{"^LL", []int8{0, 1, 1}},
		{"^", []int8{1, 1, 1}},
		{"bogus", []int8{0, 0, 0}},
		{"LL,,Simple", []int8{1, 0, 1}},
		{"LL, Simple", []int8{1, 0, 0}}, // " Simple" is not a name: NCCL does not trim
		{"allreduce:LL", []int8{0, 0, 0}},
	} {
		assert.Equal(t, tc.want, ParseFlatEnableList(names, tc.in), tc.in)
	}
}
