package bootstrap

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
)

// protocolMagic opens every handshake; it names the protocol and its version.
const protocolMagic = "collplan-bootstrap/1"

const nonceLen = 32

// The HMAC labels of the two directions: rank 0's proof can never pass as a peer's (a reflected
// handshake), nor the other way round.
const (
	labelRoot = protocolMagic + " rank0"
	labelPeer = protocolMagic + " peer"
)

// ErrAuth is matched (errors.Is) by a failed handshake: the other side does not know the job
// secret (or the two sides were given different ones).
var ErrAuth = errors.New("bootstrap: authentication failed")

// proof is HMAC-SHA256(secret, label || peerNonce || rootNonce).
func proof(secret Secret, label string, peerNonce, rootNonce []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(label))
	m.Write(peerNonce)
	m.Write(rootNonce)
	return m.Sum(nil)
}

func newNonce() []byte {
	b := make([]byte, nonceLen)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return b
}

// peerHandshake is the connecting side: it sends a fresh nonce, checks rank 0's proof over both
// nonces, then proves its own knowledge of the secret.
func peerHandshake(rw io.ReadWriter, secret Secret) error {
	nc := newNonce()
	if err := writeFrame(rw, frameHello, append([]byte(protocolMagic), nc...)); err != nil {
		return err
	}
	p, err := expect(rw, maxHandshakeFrame, frameChallenge)
	if err != nil {
		return err
	}
	if len(p) != nonceLen+sha256.Size {
		return fmt.Errorf("%w: challenge of %d bytes, want %d", ErrFrame, len(p), nonceLen+sha256.Size)
	}
	ns, rootProof := p[:nonceLen], p[nonceLen:]
	if !hmac.Equal(rootProof, proof(secret, labelRoot, nc, ns)) {
		return fmt.Errorf("%w: the listener did not prove it knows the job secret (a stranger, or a different %s)", ErrAuth, EnvSecret)
	}
	return writeFrame(rw, frameProof, proof(secret, labelPeer, nc, ns))
}

// rootHandshake is rank 0's side: it reads the peer's nonce, answers with its own fresh nonce
// and its proof, and checks the peer's proof over both nonces. A failed proof is answered with a
// Rejected frame.
func rootHandshake(rw io.ReadWriter, secret Secret) error {
	p, err := expect(rw, maxHandshakeFrame, frameHello)
	if err != nil {
		return err
	}
	if len(p) != len(protocolMagic)+nonceLen || !bytes.HasPrefix(p, []byte(protocolMagic)) {
		return fmt.Errorf("%w: hello is not %s", ErrFrame, protocolMagic)
	}
	nc := p[len(protocolMagic):]
	ns := newNonce()
	if err := writeFrame(rw, frameChallenge, append(ns, proof(secret, labelRoot, nc, ns)...)); err != nil {
		return err
	}
	pp, err := expect(rw, maxHandshakeFrame, frameProof)
	if err != nil {
		return err
	}
	if !hmac.Equal(pp, proof(secret, labelPeer, nc, ns)) {
		writeFrame(rw, frameRejected, []byte("authentication failed: check that every rank has the same "+EnvSecret))
		return fmt.Errorf("%w: the peer did not prove it knows the job secret", ErrAuth)
	}
	return nil
}
