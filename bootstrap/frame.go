package bootstrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame types of the rendezvous protocol (see the package comment).
const (
	frameHello     byte = 'H' // peer -> rank 0: magic, peer nonce
	frameChallenge byte = 'C' // rank 0 -> peer: rank 0's nonce, rank 0's proof
	frameProof     byte = 'P' // peer -> rank 0: peer's proof
	frameRecord    byte = 'R' // peer -> rank 0: the peer's Record (JSON)
	frameWaiting   byte = 'W' // rank 0 -> peers: the ranks still missing (JSON)
	frameRoster    byte = 'S' // rank 0 -> peers: the Roster (JSON)
	frameFatal     byte = 'E' // rank 0 -> peers: the job cannot start (text)
	frameRejected  byte = 'X' // rank 0 -> one peer: this connection is refused, the job goes on (text)
)

// Frame size limits: what rank 0 reads from a connection not yet trusted, and what a peer reads
// from an authenticated rank 0 (the roster of a large job).
const (
	maxHandshakeFrame = 1 << 12
	maxRosterFrame    = 1 << 24
)

// ErrFrame is matched (errors.Is) by every malformed-frame error.
var ErrFrame = errors.New("bootstrap: malformed frame")

// frame is one protocol message: a 4-byte big-endian length n, then n bytes: the type and the
// payload.
type frame struct {
	typ     byte
	payload []byte
}

// DecodeFrame decodes the frame at the start of b, returning it and the bytes after it. A frame
// longer than max, an empty frame, or an unknown type is an error matching ErrFrame; a b that
// ends inside the frame is io.ErrUnexpectedEOF.
func DecodeFrame(b []byte, max int) (typ byte, payload, rest []byte, err error) {
	if len(b) < 4 {
		return 0, nil, nil, io.ErrUnexpectedEOF
	}
	n, err := frameLen(b[:4], max)
	if err != nil {
		return 0, nil, nil, err
	}
	if uint64(len(b)-4) < uint64(n) {
		return 0, nil, nil, io.ErrUnexpectedEOF
	}
	body := b[4 : 4+n]
	if !knownType(body[0]) {
		return 0, nil, nil, fmt.Errorf("%w: unknown type %#x", ErrFrame, body[0])
	}
	return body[0], body[1:], b[4+n:], nil
}

func frameLen(h []byte, max int) (uint32, error) {
	n := binary.BigEndian.Uint32(h)
	if n == 0 {
		return 0, fmt.Errorf("%w: empty frame", ErrFrame)
	}
	if uint64(n) > uint64(max) {
		return 0, fmt.Errorf("%w: %d bytes, over the limit of %d", ErrFrame, n, max)
	}
	return n, nil
}

func knownType(t byte) bool {
	switch t {
	case frameHello, frameChallenge, frameProof, frameRecord, frameWaiting, frameRoster, frameFatal, frameRejected:
		return true
	}
	return false
}

// readFrame reads one frame of at most max bytes from r, allocating only after the length is
// checked.
func readFrame(r io.Reader, max int) (frame, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	n, err := frameLen(h[:], max)
	if err != nil {
		return frame{}, err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	if !knownType(body[0]) {
		return frame{}, fmt.Errorf("%w: unknown type %#x", ErrFrame, body[0])
	}
	return frame{typ: body[0], payload: body[1:]}, nil
}

// appendFrame appends the encoding of a frame to b.
func appendFrame(b []byte, typ byte, payload []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)+1))
	b = append(b, typ)
	return append(b, payload...)
}

func writeFrame(w io.Writer, typ byte, payload []byte) error {
	_, err := w.Write(appendFrame(nil, typ, payload))
	return err
}

// expect reads a frame of type want; a Fatal or Rejected frame becomes a *RemoteError, any other
// type an ErrFrame.
func expect(r io.Reader, max int, want byte) ([]byte, error) {
	f, err := readFrame(r, max)
	if err != nil {
		return nil, err
	}
	switch {
	case f.typ == want:
		return f.payload, nil
	case f.typ == frameFatal || f.typ == frameRejected:
		return nil, &RemoteError{Msg: string(f.payload), Fatal: f.typ == frameFatal}
	}
	return nil, fmt.Errorf("%w: got type %q, want %q", ErrFrame, f.typ, want)
}

// RemoteError is an error rank 0 sent: Fatal when the job cannot start (a missing rank, records
// that disagree), else a refusal of this one connection (a failed proof, a stale file's nonce).
type RemoteError struct {
	Msg   string
	Fatal bool
}

func (e *RemoteError) Error() string { return "bootstrap: rank 0: " + e.Msg }
