package net

import (
	"fmt"
	stdnet "net"
	"net/netip"
	"strings"

	"github.com/collplan/collplan/engine/internal/wire"
)

// IfaceFilter is NCCL_SOCKET_IFNAME's syntax (NCCL's parseStringList and matchIfList): a
// comma-separated list of interface-name prefixes; a leading '^' makes it a list to exclude; a
// leading '=' (after the '^', if any) makes the names exact rather than prefixes.
type IfaceFilter struct {
	Exclude, Exact bool
	Names          []string
}

// ParseIfaceFilter parses an NCCL_SOCKET_IFNAME value; "" is an error (the caller applies the
// default, see Interface).
func ParseIfaceFilter(s string) (IfaceFilter, error) {
	var f IfaceFilter
	rest := s
	if strings.HasPrefix(rest, "^") {
		f.Exclude, rest = true, rest[1:]
	}
	if strings.HasPrefix(rest, "=") {
		f.Exact, rest = true, rest[1:]
	}
	for _, n := range strings.Split(rest, ",") {
		if n = strings.TrimSpace(n); n != "" {
			f.Names = append(f.Names, n)
		}
	}
	if len(f.Names) == 0 {
		return f, fmt.Errorf("%w: NCCL_SOCKET_IFNAME %q names no interface", wire.ErrInvalid, s)
	}
	return f, nil
}

// Match reports whether interface name passes the filter.
func (f IfaceFilter) Match(name string) bool {
	hit := false
	for _, n := range f.Names {
		if (f.Exact && name == n) || (!f.Exact && strings.HasPrefix(name, n)) {
			hit = true
			break
		}
	}
	return hit != f.Exclude
}

// Iface is one network interface with its addresses, as Interface chooses among them.
type Iface struct {
	Name  string
	Addrs []netip.Addr
}

// Interface picks the interface a rank listens on and advertises, and its address: the first of
// ifaces that the NCCL_SOCKET_IFNAME value spec passes and that has an address (IPv4 before IPv6,
// link-local left out: our choice; NCCL takes getifaddrs' order unless NCCL_SOCKET_FAMILY says).
// With spec "" it follows NCCL's automatic order (src/misc/socket.cc): ib*, then any interface but
// docker* and lo, then docker*, then lo.
func Interface(spec string, ifaces []Iface) (string, netip.Addr, error) {
	var tries []IfaceFilter
	if spec == "" {
		tries = []IfaceFilter{{Names: []string{"ib"}}, {Exclude: true, Names: []string{"docker", "lo"}}, {Names: []string{"docker"}}, {Names: []string{"lo"}}}
	} else {
		f, err := ParseIfaceFilter(spec)
		if err != nil {
			return "", netip.Addr{}, err
		}
		tries = []IfaceFilter{f}
	}
	for _, f := range tries {
		for _, want4 := range []bool{true, false} {
			for _, i := range ifaces {
				if !f.Match(i.Name) {
					continue
				}
				for _, a := range i.Addrs {
					if a.Is4() == want4 && !a.IsLinkLocalUnicast() {
						return i.Name, a, nil
					}
				}
			}
		}
	}
	names := make([]string, len(ifaces))
	for k, i := range ifaces {
		names[k] = i.Name
	}
	return "", netip.Addr{}, fmt.Errorf("%w: NCCL_SOCKET_IFNAME %q matches no interface with an address (interfaces: %s)",
		wire.ErrInvalid, spec, strings.Join(names, ", "))
}

// SystemInterfaces lists this network namespace's interfaces that are up, with their addresses.
func SystemInterfaces() ([]Iface, error) {
	list, err := stdnet.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("net: interfaces: %w", err)
	}
	var out []Iface
	for _, i := range list {
		if i.Flags&stdnet.FlagUp == 0 {
			continue
		}
		addrs, err := i.Addrs()
		if err != nil {
			return nil, fmt.Errorf("net: interface %s: %w", i.Name, err)
		}
		it := Iface{Name: i.Name}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				it.Addrs = append(it.Addrs, p.Addr().Unmap())
			}
		}
		out = append(out, it)
	}
	return out, nil
}

// Listen listens on port of the interface NCCL_SOCKET_IFNAME value spec picks among this network
// namespace's interfaces (Interface; port 0 is an ephemeral port): the address a host advertises
// is the listener's.
func Listen(spec string, port int) (stdnet.Listener, error) {
	ifaces, err := SystemInterfaces()
	if err != nil {
		return nil, err
	}
	name, addr, err := Interface(spec, ifaces)
	if err != nil {
		return nil, err
	}
	l, err := stdnet.Listen("tcp", netip.AddrPortFrom(addr, uint16(port)).String())
	if err != nil {
		return nil, fmt.Errorf("net: listen on %s (%s): %w", name, addr, err)
	}
	return l, nil
}
