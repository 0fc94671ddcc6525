package nvls

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLayout checks the geometry against hand derivations: with Members m and StepBytes S, a slot
// is m*S, a buffer 8 slots, the counters lines 1..3m after the layout line, data from 128*(1+3m).
func TestLayout(t *testing.T) {
	tests := []struct {
		name                      string
		l                         Layout
		slot, buf, size           int
		up0, dn0, upLast, ctrLast int // ctrLast: the last member's Done counter
	}{
		// 2 x 64: data from 7*128 = 896; slot 128, buffer 1024; 896 + 4*1024.
		{"2x64", Layout{2, 64}, 128, 1024, 4992, 896, 1920, 2944, 768},
		// 3 x 32: data from 10*128 = 1280; slot 96, buffer 768; up(2) = 1280 + 4*768 = 4352;
		// size 1280 + 6*768 = 5888; member 2's Done is line 1+6+2 = 9: 1152.
		{"3x32", Layout{3, 32}, 96, 768, 5888, 1280, 2048, 4352, 1152},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.l
			assert.Equal(t, tc.slot, l.SlotBytes())
			assert.Equal(t, tc.buf, l.BufferBytes())
			assert.Equal(t, tc.size, l.Size())
			assert.Equal(t, tc.up0, l.UpOffset(0))
			assert.Equal(t, tc.dn0, l.DownOffset(0))
			assert.Equal(t, tc.upLast, l.UpOffset(l.Members-1))
			assert.Equal(t, tc.ctrLast, l.CounterOffset(l.Members-1, Done))
		})
	}
}

// TestLayoutWordAndRegion: the layout word tells the member count and the step apart (a member
// that maps a region of another geometry must see a different word), and the region names are
// "nvls/NODE/CH".
func TestLayoutWordAndRegion(t *testing.T) {
	a, b, c := Layout{2, 64}.Word(), Layout{3, 64}.Word(), Layout{2, 32}.Word()
	assert.NotEqual(t, a, b)
	assert.NotEqual(t, a, c)
	assert.Equal(t, a, Layout{2, 64}.Word())
	assert.Equal(t, "nvls/12/5", Region(12, 5))
	assert.Equal(t, "nvls/0/0", Region(0, 0))
}
