package net

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/engine/internal/wire"
)

func TestIfaceFilter(t *testing.T) {
	for _, tc := range []struct {
		spec string
		pass []string
		fail []string
	}{
		{"eth", []string{"eth0", "eth1", "eth"}, []string{"ib0", "veth0"}},
		{"eth0,ib", []string{"eth0", "eth01", "ib0"}, []string{"eth1", "lo"}},
		{"=eth0", []string{"eth0"}, []string{"eth01", "eth1"}},
		{"^docker,lo", []string{"eth0", "ib0"}, []string{"docker0", "lo"}},
		{"^=eth0", []string{"eth01", "lo"}, []string{"eth0"}},
	} {
		f, err := ParseIfaceFilter(tc.spec)
		require.NoError(t, err, tc.spec)
		for _, n := range tc.pass {
			assert.True(t, f.Match(n), "%s should pass %s", tc.spec, n)
		}
		for _, n := range tc.fail {
			assert.False(t, f.Match(n), "%s should not pass %s", tc.spec, n)
		}
	}
	for _, bad := range []string{"^", "=", "^=", ",", ""} {
		_, err := ParseIfaceFilter(bad)
		assert.ErrorIs(t, err, wire.ErrInvalid, "%q", bad)
		assert.ErrorContains(t, err, "NCCL_SOCKET_IFNAME", "%q", bad)
	}
}

func TestInterface(t *testing.T) {
	a := netip.MustParseAddr
	ifaces := []Iface{
		{Name: "lo", Addrs: []netip.Addr{a("127.0.0.1"), a("::1")}},
		{Name: "docker0", Addrs: []netip.Addr{a("172.17.0.1")}},
		{Name: "eth0", Addrs: []netip.Addr{a("fe80::1"), a("fd00::5"), a("10.0.0.5")}},
		{Name: "eth1"},
	}
	for _, tc := range []struct {
		spec, name, addr string
		ifaces           []Iface
	}{
		{"", "eth0", "10.0.0.5", ifaces},          // default: not docker, not lo; IPv4 first
		{"", "docker0", "172.17.0.1", ifaces[:2]}, // then docker
		{"", "lo", "127.0.0.1", ifaces[:1]},       // then lo
		{"lo", "lo", "127.0.0.1", ifaces},
		{"=eth1,eth0", "eth0", "10.0.0.5", ifaces}, // eth1 has no address
		{"^eth,lo", "docker0", "172.17.0.1", ifaces},
	} {
		name, addr, err := Interface(tc.spec, tc.ifaces)
		require.NoError(t, err, tc.spec)
		assert.Equal(t, tc.name, name, tc.spec)
		assert.Equal(t, tc.addr, addr.String(), tc.spec)
	}
	_, _, err := Interface("ib", ifaces)
	assert.ErrorContains(t, err, `NCCL_SOCKET_IFNAME "ib" matches no interface with an address (interfaces: lo, docker0, eth0, eth1)`)
	got, err := SystemInterfaces()
	require.NoError(t, err)
	_, _, err = Interface("lo", got)
	assert.NoError(t, err, "this machine's loopback")
}
