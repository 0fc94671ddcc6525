//go:build !linux

package net

import (
	stdnet "net"
	"time"
)

// setUserTimeout: TCP_USER_TIMEOUT is Linux's; elsewhere the heartbeat and read deadlines remain.
func setUserTimeout(*stdnet.TCPConn, time.Duration) {}
