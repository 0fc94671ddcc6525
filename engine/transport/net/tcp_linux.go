//go:build linux

package net

import (
	stdnet "net"
	"syscall"
	"time"
)

// setUserTimeout sets TCP_USER_TIMEOUT (18): unacknowledged data for this long ends the socket
// with an error, so a dead link is noticed even while the sender's buffer is not full.
func setUserTimeout(c *stdnet.TCPConn, d time.Duration) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, 18, int(d.Milliseconds()))
	})
}
