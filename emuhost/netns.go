package emuhost

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// InNetns runs fn on an OS thread that is in host's network namespace, from this process: the sockets
// fn opens belong to the host (its addresses, routes and link), and stay there after fn returns, to be
// used from any goroutine. Goroutines fn starts do not run in the host's namespace, and nothing but
// the network namespace changes.
func (l *Lab) InNetns(host int, fn func() error) error {
	if host < 0 || host >= l.spec.Hosts {
		return fmt.Errorf("emuhost: host %d of a lab of %d hosts", host, l.spec.Hosts)
	}
	if l.closed.Load() {
		return fmt.Errorf("emuhost: lab %s is closed", l.rec.Lab)
	}
	path := "/run/netns/" + l.rec.Netns[host]
	errc := make(chan error, 1)
	go func() {
		// The goroutine ends locked to its thread unless the thread is back in its own namespace:
		// the runtime then ends the thread instead of reusing it.
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("emuhost: own network namespace: %w", err)
			return
		}
		defer unix.Close(self)
		target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("emuhost: host %d: %w", host, err)
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("emuhost: host %d: setns %s: %w", host, path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("emuhost: back from host %d's network namespace: %w", host, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Listen listens on TCP port (0: any free port) of host's address, in host's network namespace.
func (l *Lab) Listen(ctx context.Context, host, port int) (net.Listener, error) {
	var ln net.Listener
	err := l.InNetns(host, func() error {
		var err error
		var lc net.ListenConfig
		ln, err = lc.Listen(ctx, "tcp4", netip.AddrPortFrom(l.Addr(host), uint16(port)).String())
		return err
	})
	return ln, err
}

// Dial connects from host's network namespace to address (host:port) over TCP with d (nil: a zero
// net.Dialer).
func (l *Lab) Dial(ctx context.Context, host int, d *net.Dialer, address string) (net.Conn, error) {
	if d == nil {
		d = &net.Dialer{}
	}
	var c net.Conn
	err := l.InNetns(host, func() error {
		var err error
		c, err = d.DialContext(ctx, "tcp4", address)
		return err
	})
	return c, err
}

// AddrPort is host's address with port, as a dial address ("10.x.y.z:port").
func (l *Lab) AddrPort(host, port int) string {
	return net.JoinHostPort(l.Addr(host).String(), strconv.Itoa(port))
}
