package kernels

import (
	"math"
	"sort"
)

// An independent reference for the narrow float formats, used by the tests:
// values come from the textbook formula, and rounding picks the nearest of a
// sorted list of every representable value (ties to the even pattern). It
// shares no code with the package's bit-twiddling conversions.

type formatSpec struct {
	name       string
	nbits      int  // total bits
	ebits      int  // exponent bits
	mbits      int  // mantissa bits
	bias       int  // exponent bias
	ieee       bool // all-ones exponent is Inf (mantissa 0) or NaN
	saturating bool // encode saturates to the finite max (fp8 SATFINITE)
}

var (
	specHalf = formatSpec{name: "float16", nbits: 16, ebits: 5, mbits: 10, bias: 15, ieee: true}
	specBF16 = formatSpec{name: "bfloat16", nbits: 16, ebits: 8, mbits: 7, bias: 127, ieee: true}
	specE4M3 = formatSpec{name: "fp8e4m3", nbits: 8, ebits: 4, mbits: 3, bias: 7, saturating: true}
	specE5M2 = formatSpec{name: "fp8e5m2", nbits: 8, ebits: 5, mbits: 2, bias: 15, ieee: true, saturating: true}
)

// decode returns the value of pattern p.
func (s formatSpec) decode(p uint32) float64 {
	sign := p >> (s.nbits - 1) & 1
	e := int(p >> s.mbits & (1<<s.ebits - 1))
	m := int(p & (1<<s.mbits - 1))
	var v float64
	switch {
	case s.ieee && e == 1<<s.ebits-1:
		if m != 0 {
			return math.NaN()
		}
		v = math.Inf(1)
	case !s.ieee && e == 1<<s.ebits-1 && m == 1<<s.mbits-1: // E4M3FN: S.1111.111 is NaN
		return math.NaN()
	case e == 0:
		v = math.Ldexp(float64(m), 1-s.bias-s.mbits)
	default:
		v = math.Ldexp(float64(1<<s.mbits+m), e-s.bias-s.mbits)
	}
	if sign == 1 {
		v = -v
	}
	return v
}

// isNaN reports whether pattern p is a NaN.
func (s formatSpec) isNaN(p uint32) bool { return math.IsNaN(s.decode(p)) }

type refTable struct {
	spec formatSpec
	vals []float64 // every finite value >= 0, ascending
	pats []uint32  // their patterns
}

func newRefTable(s formatSpec) *refTable {
	t := &refTable{spec: s}
	for p := uint32(0); p < 1<<(s.nbits-1); p++ {
		v := s.decode(p)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		t.vals = append(t.vals, v)
		t.pats = append(t.pats, p)
	}
	if !sort.Float64sAreSorted(t.vals) {
		panic("positive patterns must ascend")
	}
	return t
}

var (
	refHalf = newRefTable(specHalf)
	refBF16 = newRefTable(specBF16)
	refE4M3 = newRefTable(specE4M3)
	refE5M2 = newRefTable(specE5M2)
)

// maxPat returns the pattern of the largest finite value.
func (t *refTable) maxPat() uint32 { return t.pats[len(t.pats)-1] }

// encode rounds x to the nearest representable value, ties to the even
// pattern. Past the largest finite value sits a virtual next value one ulp
// further (pattern maxPat+1); rounding to it means overflow: the finite max
// when saturating, else Inf. NaN encodes as the all-ones positive pattern
// (the canonical NaN used by CUDA).
func (t *refTable) encode(x float64) uint32 {
	s := t.spec
	if math.IsNaN(x) {
		return 1<<(s.nbits-1) - 1
	}
	var sign uint32
	if math.Signbit(x) {
		sign = 1 << (s.nbits - 1)
	}
	ax := math.Abs(x)
	n := len(t.vals)
	i := sort.SearchFloat64s(t.vals, ax)
	if i < n && t.vals[i] == ax {
		return sign | t.pats[i]
	}
	lo, plo := t.vals[i-1], t.pats[i-1]
	var hi float64
	var phi uint32
	overflow := i == n
	if overflow {
		hi, phi = t.vals[n-1]+(t.vals[n-1]-t.vals[n-2]), t.pats[n-1]+1
	} else {
		hi, phi = t.vals[i], t.pats[i]
	}
	dlo, dhi := ax-lo, hi-ax
	pickHi := dhi < dlo || dhi == dlo && phi&1 == 0
	if !pickHi {
		return sign | plo
	}
	if overflow {
		if s.saturating {
			return sign | t.maxPat()
		}
		return sign | phi // the Inf pattern of an IEEE format
	}
	return sign | phi
}

// eps returns the machine epsilon (ulp of 1) and the smallest subnormal.
func (s formatSpec) eps() (eps, minSub float64) {
	return math.Ldexp(1, -s.mbits), math.Ldexp(1, 1-s.bias-s.mbits)
}
