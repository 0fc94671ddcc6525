package bootstrap

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeFrame(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []byte
		max     int
		typ     byte
		payload []byte
		rest    []byte
		err     string // "" for success; "EOF" for io.ErrUnexpectedEOF
	}{
		{name: "hello", in: []byte{0, 0, 0, 3, 'H', 'h', 'i'}, max: 16, typ: 'H', payload: []byte("hi"), rest: []byte{}},
		{name: "type only, then more", in: []byte{0, 0, 0, 1, 'E', 9, 9}, max: 16, typ: 'E', payload: []byte{}, rest: []byte{9, 9}},
		{name: "at the limit", in: append([]byte{0, 0, 0, 4, 'R'}, "abc"...), max: 4, typ: 'R', payload: []byte("abc"), rest: []byte{}},
		{name: "over the limit", in: append([]byte{0, 0, 0, 5, 'R'}, "abcd"...), max: 4, err: "5 bytes, over the limit of 4"},
		{name: "huge length, no body", in: []byte{0xff, 0xff, 0xff, 0xff}, max: 1 << 24, err: "4294967295 bytes, over the limit"},
		{name: "empty frame", in: []byte{0, 0, 0, 0}, max: 16, err: "empty frame"},
		{name: "unknown type", in: []byte{0, 0, 0, 1, 'Z'}, max: 16, err: "unknown type 0x5a"},
		{name: "short header", in: []byte{0, 0, 1}, max: 16, err: "EOF"},
		{name: "short body", in: []byte{0, 0, 0, 3, 'H', 'h'}, max: 16, err: "EOF"},
		{name: "nothing", in: nil, max: 16, err: "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typ, payload, rest, err := DecodeFrame(tc.in, tc.max)
			f, rerr := readFrame(bytes.NewReader(tc.in), tc.max)
			switch tc.err {
			case "":
				require.NoError(t, err)
				assert.Equal(t, tc.typ, typ)
				assert.Equal(t, tc.payload, payload)
				assert.Equal(t, tc.rest, rest)
				require.NoError(t, rerr)
				assert.Equal(t, frame{typ: tc.typ, payload: tc.payload}, f)
			case "EOF":
				assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
				assert.Error(t, rerr)
			default:
				assert.ErrorIs(t, err, ErrFrame)
				assert.ErrorContains(t, err, tc.err)
				assert.ErrorIs(t, rerr, ErrFrame)
			}
		})
	}
}

// FuzzDecodeFrame: the decoder never panics, agrees with the stream reader, and what it decodes
// encodes back to the bytes it consumed.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(appendFrame(nil, frameHello, append([]byte(protocolMagic), make([]byte, nonceLen)...)), 64)
	f.Add(appendFrame(appendFrame(nil, frameWaiting, []byte(`{"missing":"1-3"}`)), frameRoster, []byte(`{}`)), 1<<10)
	f.Add([]byte{0, 0, 0, 0}, 16)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 'H'}, 1<<24)
	f.Add([]byte{0, 0, 0, 2, 'Q', 0}, 16)
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		if max < 1 || max > 1<<24 {
			max = 1 << 12
		}
		typ, payload, rest, err := DecodeFrame(b, max)
		fr, rerr := readFrame(bytes.NewReader(b), max)
		if err != nil {
			if rerr == nil {
				t.Fatalf("DecodeFrame: %v, readFrame accepted %q", err, fr.typ)
			}
			return
		}
		if rerr != nil {
			t.Fatalf("readFrame: %v, DecodeFrame accepted %q", rerr, typ)
		}
		if fr.typ != typ || !bytes.Equal(fr.payload, payload) {
			t.Fatalf("readFrame %q %x, DecodeFrame %q %x", fr.typ, fr.payload, typ, payload)
		}
		if len(payload)+1 > max || !knownType(typ) {
			t.Fatalf("accepted a frame of %d bytes (limit %d), type %q", len(payload)+1, max, typ)
		}
		consumed := b[:len(b)-len(rest)]
		if enc := appendFrame(nil, typ, payload); !bytes.Equal(enc, consumed) {
			t.Fatalf("re-encoded %x, consumed %x", enc, consumed)
		}
	})
}
