//go:build !linux

package net

import (
	"io"
	stdnet "net"
	"time"
)

// setUserTimeout: TCP_USER_TIMEOUT is Linux's; elsewhere the heartbeat and read deadlines remain.
func setUserTimeout(*stdnet.TCPConn, time.Duration) {}

// newSpinReader: elsewhere the reader waits in Go's network poller (see tcp_linux.go).
func newSpinReader(c stdnet.Conn, _ time.Duration) io.Reader { return c }

// holdSpin and threadSleep: elsewhere hold's sleeps are Go's timers (see tcp_linux.go).
const holdSpin = 20 * time.Microsecond

func threadSleep(d time.Duration) { time.Sleep(d) }
