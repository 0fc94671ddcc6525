// Package bytesize parses and prints byte counts the way nccl-tests does: plain bytes or a
// 1024-based suffix (K M G T, or KiB MiB GiB TiB; case-insensitive; an optional trailing B).
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

var units = []struct {
	suffix string
	shift  uint
}{
	{"kib", 10}, {"mib", 20}, {"gib", 30}, {"tib", 40},
	{"kb", 10}, {"mb", 20}, {"gb", 30}, {"tb", 40},
	{"k", 10}, {"m", 20}, {"g", 30}, {"t", 40},
	{"b", 0},
}

// Parse reads "4096", "4K", "1MiB", "2g". Negative, fractional and overflowing sizes are errors.
func Parse(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	shift := uint(0)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, shift = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.shift
			break
		}
	}
	if t == "" {
		return 0, fmt.Errorf("size %q: no number", s)
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: not a whole number of bytes with an optional K/M/G/T or KiB/MiB/GiB/TiB suffix", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("size %q: negative", s)
	}
	if v > math.MaxInt64>>shift {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return v << shift, nil
}

// Format prints n with the largest binary unit that divides it exactly ("1 MiB", "1536 KiB",
// "1000 B").
func Format(n int64) string {
	names := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for n != 0 && n%1024 == 0 && i < len(names)-1 {
		n /= 1024
		i++
	}
	return fmt.Sprintf("%d %s", n, names[i])
}

// Flag is a flag.Value of a byte count read by Parse, stored in *V.
type Flag struct{ V *int64 }

func (f Flag) String() string {
	if f.V == nil {
		return ""
	}
	return strconv.FormatInt(*f.V, 10)
}

// Set parses s into *V, which it leaves unchanged on error.
func (f Flag) Set(s string) error {
	v, err := Parse(s)
	if err == nil {
		*f.V = v
	}
	return err
}

// Approx formats n in the largest 1024-based unit it reaches, to one decimal ("22.8 GiB"): for
// estimates and quantities read off the system, where Format's exact units would be unreadable.
func Approx(n int64) string {
	names := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, i := float64(n), 0
	for (v >= 1024 || v <= -1024) && i < len(names)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, names[i])
}
