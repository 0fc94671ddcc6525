package emuhost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// copyChunk is the size of LinkBound's writes and reads.
const copyChunk = 1 << 20

// LinkBound is n / t bytes per second, where t is the time a plain TCP copy of n bytes takes from host
// from to host to: one connection, default socket options, 1 MiB writes and reads, timed from the first
// write to the receiver's read of the last byte. It is the link's own capacity, the bound a collective
// between the two hosts is compared against (the handshake is not timed; slow start is). At RateMbit r
// it is a little under r/8*1e6: tbf counts each frame's Ethernet header (14 bytes) and TCP/IP headers
// (52 bytes) take their share of each 1500-byte packet.
func LinkBound(ctx context.Context, lab *Lab, from, to int, n int64) (float64, error) {
	if from == to {
		return 0, fmt.Errorf("emuhost: link bound from host %d to itself", from)
	}
	if n < 1 {
		return 0, fmt.Errorf("emuhost: link bound of %d bytes: want 1 or more", n)
	}
	ln, err := lab.Listen(ctx, to, 0)
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	acc := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		acc <- accepted{c, err}
	}()
	send, err := lab.Dial(ctx, from, nil, ln.Addr().String())
	if err != nil {
		return 0, err
	}
	defer send.Close()
	var recv net.Conn
	select {
	case a := <-acc:
		if a.err != nil {
			return 0, fmt.Errorf("emuhost: link bound: accept: %w", a.err)
		}
		recv = a.c
	case <-ctx.Done():
		return 0, fmt.Errorf("emuhost: link bound: accept: %w", ctx.Err())
	}
	defer recv.Close()
	// Both ends close when ctx ends, which ends the copy.
	stop := context.AfterFunc(ctx, func() { send.Close(); recv.Close() })
	defer stop()

	start := time.Now()
	werr := make(chan error, 1)
	go func() {
		buf := make([]byte, copyChunk)
		for left := n; left > 0; {
			k, err := send.Write(buf[:min(left, int64(len(buf)))])
			left -= int64(k)
			if err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	buf := make([]byte, copyChunk)
	for left := n; left > 0; {
		k, err := recv.Read(buf[:min(left, int64(len(buf)))])
		left -= int64(k)
		if err != nil && left > 0 {
			return 0, errors.Join(fmt.Errorf("emuhost: link bound: read with %d of %d bytes left: %w", left, n, err), ctx.Err())
		}
	}
	elapsed := time.Since(start)
	if err := <-werr; err != nil {
		return 0, fmt.Errorf("emuhost: link bound: write: %w", err)
	}
	return float64(n) / elapsed.Seconds(), nil
}
