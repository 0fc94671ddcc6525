package emuhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// stateDir holds one record per lab (<lab>.json) and the lock file that makes choosing a lab's names
// and subnet atomic across processes.
var stateDir = "/run/collplan-emuhost"

// lockTimeout bounds the wait for another process's Create to finish choosing its names.
const lockTimeout = 30 * time.Second

// record is what a lab writes about itself before it makes anything, so that whoever finds it after its
// owner died can remove every name it made or was about to make.
type record struct {
	Lab        string   `json:"lab"`         // the lab's id, the prefix of all its names
	Owner      int      `json:"owner_pid"`   // the process that made it
	OwnerStart uint64   `json:"owner_start"` // the owner's start time (field 22 of /proc/PID/stat)
	Subnet     string   `json:"subnet"`      // 10.x.y.0/24
	Bridge     string   `json:"bridge"`
	Links      []string `json:"links"` // the bridge ends of the hosts' veth pairs
	Netns      []string `json:"netns"`
	Route      string   `json:"route"` // the unreachable route to Subnet in the machine's namespace
}

// procStart is field 22 of /proc/PID/stat, the process's start time in clock ticks after boot: with the
// pid it names one process, since a pid reused after a death comes with a later start time. A zombie
// (state Z) or dying (X) process is an error: it is dead, though not yet reaped.
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces or ')': the fields after it
	// start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("emuhost: /proc/%d/stat: no ')' after the command name", pid)
	}
	fields := strings.Fields(s[i+1:])
	const startField = 22 - 3 // fields[0] is field 3 (state)
	if len(fields) <= startField {
		return 0, fmt.Errorf("emuhost: /proc/%d/stat: %d fields after the command name, want more than %d", pid, len(fields), startField)
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, fmt.Errorf("emuhost: pid %d is dead (state %s)", pid, fields[0])
	}
	return strconv.ParseUint(fields[startField], 10, 64)
}

// ownerAlive says whether the process pid still runs (a zombie does not) and is the one that started
// at start.
func ownerAlive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	got, err := procStart(pid)
	return err == nil && got == start
}

// lockState takes the state directory's lock (flock on stateDir/lock), waiting at most lockTimeout.
func lockState(ctx context.Context) (unlock func(), err error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("emuhost: state directory: %w", err)
	}
	path := filepath.Join(stateDir, "lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("emuhost: lock: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, lockTimeout)
	defer cancel()
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the file releases the lock
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("emuhost: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("emuhost: lock %s: another Create held it for %v: %w", path, lockTimeout, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func recordPath(lab string) string { return filepath.Join(stateDir, lab+".json") }

// hostsPath is the file a lab's hosts see as /etc/hosts.
func hostsPath(lab string) string { return filepath.Join(stateDir, lab+".hosts") }

// writeRecord writes rec atomically (a temporary file renamed over the record).
func writeRecord(rec *record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := recordPath(rec.Lab) + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("emuhost: write lab record: %w", err)
	}
	if err := os.Rename(tmp, recordPath(rec.Lab)); err != nil {
		return fmt.Errorf("emuhost: write lab record: %w", err)
	}
	return nil
}

// readRecords reads every lab record in stateDir. A record that does not parse is an error naming its
// file: records are written atomically, so it is not one of this package's.
func readRecords() ([]*record, error) {
	paths, err := filepath.Glob(filepath.Join(stateDir, "*.json"))
	if err != nil {
		return nil, err
	}
	var recs []*record
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed by its lab's Close since the glob
		}
		if err != nil {
			return nil, fmt.Errorf("emuhost: lab record %s: %w", p, err)
		}
		var rec record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("emuhost: lab record %s: %w (not written by this package: remove it by hand)", p, err)
		}
		if rec.Lab+".json" != filepath.Base(p) {
			return nil, fmt.Errorf("emuhost: lab record %s: names lab %q (not written by this package: remove it by hand)", p, rec.Lab)
		}
		recs = append(recs, &rec)
	}
	return recs, nil
}

// removeStale removes the labs whose owner is dead and returns the records of the others.
func removeStale(ctx context.Context) (live []*record, err error) {
	recs, err := readRecords()
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, rec := range recs {
		if ownerAlive(rec.Owner, rec.OwnerStart) {
			live = append(live, rec)
			continue
		}
		if err := removeLab(ctx, rec); err != nil {
			errs = append(errs, fmt.Errorf("emuhost: stale lab %s (owner pid %d gone): %w", rec.Lab, rec.Owner, err))
			live = append(live, rec) // its names may still exist: keep away from them
		}
	}
	return live, errors.Join(errs...)
}

// removeLab removes what rec names and then rec's file: it kills every process left in the lab's
// namespaces (its hosts' namespace holders and any command still running), deletes the veth pairs, the
// bridge, the namespaces, the route and the hosts' /etc/hosts. Names already gone are skipped, so it can run twice.
func removeLab(ctx context.Context, rec *record) error {
	var errs []error
	netns, err := listNetns(ctx)
	if err != nil {
		return err
	}
	for _, ns := range rec.Netns {
		if !netns[ns] {
			continue
		}
		if _, err := killNetns(ctx, ns, 0); err != nil {
			errs = append(errs, err)
		}
	}
	links, err := listLinks(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, name := range append(append([]string(nil), rec.Links...), rec.Bridge) {
		if name == "" || !links[name] {
			continue
		}
		if _, err := run(ctx, "delete link "+name, "ip", "link", "delete", name); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range rec.Netns {
		if !netns[ns] {
			continue
		}
		if _, err := run(ctx, "delete network namespace "+ns, "ip", "netns", "delete", ns); err != nil {
			errs = append(errs, err)
		}
	}
	if rec.Route != "" {
		has, err := hasUnreachableRoute(ctx, rec.Route)
		if err != nil {
			errs = append(errs, err)
		} else if has {
			if _, err := run(ctx, "delete route", "ip", "route", "delete", "unreachable", rec.Route, "metric", routeMetric); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := os.Remove(hostsPath(rec.Lab)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("emuhost: remove the hosts' /etc/hosts: %w", err)
	}
	if err := os.Remove(recordPath(rec.Lab)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("emuhost: remove lab record: %w", err)
	}
	return nil
}

// killNetns sends SIGKILL to every process whose network namespace is ns but spare and this process
// (whose threads visit hosts' namespaces in InNetns), and returns how many it signalled.
func killNetns(ctx context.Context, ns string, spare int) (int, error) {
	out, err := run(ctx, "list processes in "+ns, "ip", "netns", "pids", ns)
	if err != nil {
		return 0, err
	}
	killed := 0
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid == os.Getpid() || pid == spare {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return killed, fmt.Errorf("emuhost: kill pid %d in %s: %w", pid, ns, err)
		}
		killed++
	}
	return killed, nil
}

// listNetns is the set of named network namespaces (ip netns list).
func listNetns(ctx context.Context) (map[string]bool, error) {
	out, err := run(ctx, "list network namespaces", "ip", "-j", "netns", "list")
	if err != nil {
		return nil, err
	}
	var list []struct {
		Name string `json:"name"`
	}
	if strings.TrimSpace(out) != "" {
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			return nil, fmt.Errorf("emuhost: ip -j netns list: %w", err)
		}
	}
	set := map[string]bool{}
	for _, ns := range list {
		set[ns.Name] = true
	}
	return set, nil
}

// listLinks is the set of the machine's network devices (ip link).
func listLinks(ctx context.Context) (map[string]bool, error) {
	out, err := run(ctx, "list links", "ip", "-j", "link", "show")
	if err != nil {
		return nil, err
	}
	var list []struct {
		Name string `json:"ifname"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("emuhost: ip -j link show: %w", err)
	}
	set := map[string]bool{}
	for _, l := range list {
		set[l.Name] = true
	}
	return set, nil
}

// hasUnreachableRoute says whether the machine's main table holds the lab's unreachable route to subnet.
func hasUnreachableRoute(ctx context.Context, subnet string) (bool, error) {
	out, err := run(ctx, "list unreachable routes", "ip", "-j", "route", "show", "type", "unreachable")
	if err != nil {
		return false, err
	}
	var list []struct {
		Dst    string `json:"dst"`
		Metric int    `json:"metric"`
	}
	if strings.TrimSpace(out) != "" {
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			return false, fmt.Errorf("emuhost: ip -j route show type unreachable: %w", err)
		}
	}
	for _, r := range list {
		if r.Dst == subnet && strconv.Itoa(r.Metric) == routeMetric {
			return true, nil
		}
	}
	return false, nil
}

// usedPrefixes is every IPv4 prefix the machine's namespace has an address in or a route to (any
// table but the default route), for choosing a subnet that collides with none.
func usedPrefixes(ctx context.Context) ([]netip.Prefix, error) {
	var used []netip.Prefix
	out, err := run(ctx, "list addresses", "ip", "-j", "addr", "show")
	if err != nil {
		return nil, err
	}
	var links []struct {
		AddrInfo []struct {
			Family    string `json:"family"`
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil {
		return nil, fmt.Errorf("emuhost: ip -j addr show: %w", err)
	}
	for _, l := range links {
		for _, a := range l.AddrInfo {
			if a.Family != "inet" {
				continue
			}
			addr, err := netip.ParseAddr(a.Local)
			if err != nil {
				return nil, fmt.Errorf("emuhost: ip -j addr show: %w", err)
			}
			p, err := addr.Prefix(a.PrefixLen)
			if err != nil {
				return nil, fmt.Errorf("emuhost: ip -j addr show: %s/%d: %w", a.Local, a.PrefixLen, err)
			}
			used = append(used, p)
		}
	}
	out, err = run(ctx, "list routes", "ip", "-j", "-4", "route", "show", "table", "all")
	if err != nil {
		return nil, err
	}
	var routes []struct {
		Dst string `json:"dst"`
	}
	if err := json.Unmarshal([]byte(out), &routes); err != nil {
		return nil, fmt.Errorf("emuhost: ip -j route show table all: %w", err)
	}
	for _, r := range routes {
		if r.Dst == "default" || r.Dst == "" {
			continue
		}
		p, err := parseDst(r.Dst)
		if err != nil {
			return nil, fmt.Errorf("emuhost: ip -j route show table all: %w", err)
		}
		used = append(used, p)
	}
	return used, nil
}

// parseDst reads a route's destination: a prefix, or an address standing for its /32.
func parseDst(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}
