package emuhost

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// MaxHosts is the most hosts a lab holds: host i is 10.x.y.(i+1) in a /24.
const MaxHosts = 250

// HostInterface is the name of each host's link to the bridge inside its namespace.
const HostInterface = "eth0"

// labPrefix begins every name a lab makes (its id "cpeh<N>", the bridge "cpeh<N>br", the veths'
// bridge ends "cpeh<N>v<i>", the namespaces "cpeh<N>-h<i>"): short, since a device name has at most 15
// bytes.
const labPrefix = "cpeh"

// maxLabs bounds the lab ids (cpeh0 to cpeh999), which keeps "cpeh999v249" within 15 bytes.
const maxLabs = 1000

// routeMetric is the metric of the lab's unreachable route in the machine's namespace: high, so that
// an address someone later puts on the bridge (its connected route has metric 0) wins over it.
const routeMetric = "4242"

// closeTimeout bounds Close (and the removal of a half-made lab): a few dozen ip commands.
const closeTimeout = 60 * time.Second

// Spec describes a lab.
type Spec struct {
	// Hosts is the number of hosts, 1 to MaxHosts.
	Hosts int
	// Name prefixes the hosts' hostnames: host i is "<Name>-h<i>". Lower-case letters, digits and
	// '-', at most 40 bytes, starting and ending with a letter or digit; "" means "emu".
	Name string
	// RateMbit shapes each host's link with tc's tbf at this rate in Mbit/s, in each direction; 0
	// leaves the links unshaped.
	RateMbit int
	// ShmBytes is the size of each host's /dev/shm (a tmpfs); 0 is tmpfs's default, half the
	// machine's memory.
	ShmBytes int64
}

var hostnamePrefix = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

func (s Spec) validate() error {
	if s.Hosts < 1 || s.Hosts > MaxHosts {
		return fmt.Errorf("emuhost: Spec.Hosts is %d: want 1 to %d", s.Hosts, MaxHosts)
	}
	if s.Name != "" && !hostnamePrefix.MatchString(s.Name) {
		return fmt.Errorf("emuhost: Spec.Name is %q: want 1 to 40 lower-case letters, digits and '-', starting and ending with a letter or digit", s.Name)
	}
	if s.RateMbit < 0 || s.RateMbit > 1_000_000 {
		return fmt.Errorf("emuhost: Spec.RateMbit is %d: want 0 (unshaped) to 1000000", s.RateMbit)
	}
	if s.ShmBytes < 0 {
		return fmt.Errorf("emuhost: Spec.ShmBytes is %d: want 0 (tmpfs's default) or more", s.ShmBytes)
	}
	return nil
}

// A Lab is a set of emulated hosts on one bridge. Its methods are safe for concurrent use.
type Lab struct {
	rec     record
	spec    Spec
	subnet  netip.Prefix
	holders []*holder // one per host: the process whose UTS, IPC and mount namespaces are the host's
	closed  atomic.Bool

	closeOnce sync.Once
	closeErr  error
}

// Create makes a lab: it first removes the labs whose owner is dead, then, under the state directory's
// lock, chooses an unused lab id (counting on from the last one chosen) and a 10.x.y.0/24 subnet that
// overlaps no address or route of the machine's namespace nor another lab's, records the lab, and
// makes a bridge (no address), one network namespace per host with lo up and a veth pair
// (HostInterface, 10.x.y.(i+1)/24, in the host; the other end on the bridge), tbf on both ends' egress
// when spec.RateMbit > 0, an unreachable route to the subnet in the machine's namespace, and each
// host's UTS, IPC and mount namespaces (hostname, /dev/shm, /etc/hosts). On an error it removes what
// it made.
func Create(ctx context.Context, spec Spec) (*Lab, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if spec.Name == "" {
		spec.Name = "emu"
	}
	unlock, err := lockState(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	live, err := removeStale(ctx)
	if err != nil {
		return nil, err
	}
	n, err := chooseID(ctx, live)
	if err != nil {
		return nil, err
	}
	id := labID(n)
	subnet, err := chooseSubnet(ctx, n, live)
	if err != nil {
		return nil, err
	}
	start, err := procStart(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("emuhost: own start time: %w", err)
	}
	l := &Lab{spec: spec, subnet: subnet}
	l.rec = record{Lab: id, Owner: os.Getpid(), OwnerStart: start, Subnet: subnet.String(),
		Bridge: id + "br", Route: subnet.String()}
	for i := range spec.Hosts {
		l.rec.Links = append(l.rec.Links, fmt.Sprintf("%sv%d", id, i))
		l.rec.Netns = append(l.rec.Netns, fmt.Sprintf("%s-h%d", id, i))
	}
	// The record comes first: a Create killed half-way leaves names that the next Create removes.
	if err := writeRecord(&l.rec); err != nil {
		return nil, err
	}
	if err := l.writeHostsFile(); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		return nil, errors.Join(err, l.teardown(cctx))
	}
	if err := l.build(ctx); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		return nil, errors.Join(err, l.teardown(cctx))
	}
	return l, nil
}

// chooseID is the first lab id, counting on from the one after the last id any Create chose (the
// file stateDir/next-id, read and written under the lock), that no live lab's record holds and that no
// device or namespace of the machine begins with. Counting on, rather than taking the smallest free
// id, keeps a new lab from taking the names of a lab just removed, which someone may still be looking
// for (a test that checks they are gone, a log).
func chooseID(ctx context.Context, live []*record) (int, error) {
	links, err := listLinks(ctx)
	if err != nil {
		return 0, err
	}
	netns, err := listNetns(ctx)
	if err != nil {
		return 0, err
	}
	used := map[string]bool{}
	for _, r := range live {
		used[r.Lab] = true
	}
	for name := range links {
		used[labOf(name)] = true
	}
	for name := range netns {
		used[labOf(name)] = true
	}
	next := 0
	counter := filepath.Join(stateDir, "next-id")
	if b, err := os.ReadFile(counter); err == nil {
		// A counter that does not parse (not this package's) restarts at 0: it only says where to
		// start looking, and every id is checked.
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 {
			next = n % maxLabs
		}
	}
	for k := range maxLabs {
		n := (next + k) % maxLabs
		if !used[labID(n)] {
			if err := os.WriteFile(counter, []byte(strconv.Itoa(n+1)+"\n"), 0o644); err != nil {
				return 0, fmt.Errorf("emuhost: lab id counter: %w", err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("emuhost: all %d lab ids are in use (see %s and ip link)", maxLabs, stateDir)
}

func labID(n int) string { return labPrefix + strconv.Itoa(n) }

// labOf is the lab id a device or namespace name begins with ("cpeh12v3" and "cpeh12-h3": "cpeh12"),
// or "" when it begins with none.
func labOf(name string) string {
	rest, ok := strings.CutPrefix(name, labPrefix)
	if !ok {
		return ""
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 {
		return ""
	}
	return labPrefix + rest[:n]
}

// chooseSubnet is the first free 10.x.y.0/24 (firstFree) from lab id n's own, 10.(201+n/256).(n%256).0:
// one that overlaps no address or route of the machine's namespace and no live lab's subnet.
func chooseSubnet(ctx context.Context, n int, live []*record) (netip.Prefix, error) {
	used, err := usedPrefixes(ctx)
	if err != nil {
		return netip.Prefix{}, err
	}
	for _, r := range live {
		p, err := netip.ParsePrefix(r.Subnet)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("emuhost: lab record %s: subnet %q: %w", recordPath(r.Lab), r.Subnet, err)
		}
		used = append(used, p)
	}
	return firstFree(used, n)
}

// The lab subnets are the /24s 10.201.0.0 to 10.255.255.0: subnet k is 10.(201+k/256).(k%256).0/24.
const (
	firstSubnet = 201 * 256
	subnets     = 256*256 - firstSubnet
)

// firstFree is the first of the lab subnets, from subnet start on and wrapping around, that overlaps
// none of used.
func firstFree(used []netip.Prefix, start int) (netip.Prefix, error) {
	for i := range subnets {
		k := firstSubnet + (start+i)%subnets
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(k >> 8), byte(k), 0}), 24)
		free := true
		for _, u := range used {
			if u.Overlaps(p) {
				free = false
				break
			}
		}
		if free {
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("emuhost: no free /24 in 10.201.0.0-10.255.255.0")
}

// tbfArgs is tc's tbf for rate Mbit/s. burst (the bucket) is the larger of 128 KiB and 1 ms at the
// rate: veth hands tbf TCP's segmentation-offloaded packets of up to 64 KiB, which tbf would split
// (at a cost in CPU) were they larger than the bucket, and at high rates 1 ms of bytes keeps the
// qdisc's timer slack (tens of microseconds) from lowering the rate; over a transfer of a second the
// bucket lets through at most burst bytes above the rate (0.5 % at 200 Mbit/s). latency 10 ms is the
// queue's bound (it holds rate*10ms + burst bytes, then drops): room for TCP's bursts without losses,
// and the most delay a bulk transfer adds to a small message queued behind it.
func tbfArgs(rateMbit int) []string {
	rateBytes := int64(rateMbit) * 1_000_000 / 8
	burst := max(int64(128<<10), rateBytes/1000)
	return []string{"root", "tbf", "rate", strconv.Itoa(rateMbit) + "mbit", "burst", strconv.FormatInt(burst, 10), "latency", "10ms"}
}

// build makes what l.rec names.
func (l *Lab) build(ctx context.Context) error {
	br := l.rec.Bridge
	if _, err := run(ctx, "add unreachable route", "ip", "route", "add", "unreachable", l.rec.Route, "metric", routeMetric); err != nil {
		return err
	}
	if _, err := run(ctx, "add bridge "+br, "ip", "link", "add", br, "type", "bridge"); err != nil {
		return err
	}
	if _, err := run(ctx, "bring bridge up", "ip", "link", "set", br, "up"); err != nil {
		return err
	}
	for i := range l.spec.Hosts {
		ns, veth, addr := l.rec.Netns[i], l.rec.Links[i], l.Addr(i)
		host := fmt.Sprintf("host %d: ", i)
		steps := [][]string{
			{"add network namespace " + ns, "ip", "netns", "add", ns},
			{"add veth pair " + veth, "ip", "link", "add", veth, "type", "veth", "peer", "name", HostInterface, "netns", ns},
			{"attach " + veth + " to the bridge", "ip", "link", "set", veth, "master", br, "up"},
			{"address " + HostInterface, "ip", "-n", ns, "addr", "add", netip.PrefixFrom(addr, 24).String(), "dev", HostInterface},
			{"bring " + HostInterface + " up", "ip", "-n", ns, "link", "set", HostInterface, "up"},
			{"bring lo up", "ip", "-n", ns, "link", "set", "lo", "up"},
		}
		if l.spec.RateMbit > 0 {
			tbf := tbfArgs(l.spec.RateMbit)
			steps = append(steps,
				append([]string{"shape " + veth + " (to the host)", "tc", "qdisc", "add", "dev", veth}, tbf...),
				append([]string{"shape " + HostInterface + " (from the host)", "tc", "-n", ns, "qdisc", "add", "dev", HostInterface}, tbf...))
		}
		for _, s := range steps {
			if _, err := run(ctx, host+s[0], s[1], s[2:]...); err != nil {
				return err
			}
		}
		h, err := startHolder(ctx, ns, l.Hostname(i), l.spec.ShmBytes, hostsPath(l.rec.Lab))
		if err != nil {
			return fmt.Errorf("emuhost: host %d: %w", i, err)
		}
		l.holders = append(l.holders, h)
	}
	return nil
}

// writeHostsFile writes the hosts' /etc/hosts (bind-mounted over theirs by their holders): the
// machine's /etc/hosts, then every host's hostname and address, so that hosts find each other by name
// (a hostfile of mpirun, the first host of SLURM_STEP_NODELIST).
func (l *Lab) writeHostsFile() error {
	base, err := os.ReadFile("/etc/hosts")
	if err != nil {
		base = []byte("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n")
	}
	var b bytes.Buffer
	b.Write(base)
	if len(base) > 0 && base[len(base)-1] != '\n' {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "# the emulated hosts of lab %s (collplan emuhost)\n", l.rec.Lab)
	for i := range l.spec.Hosts {
		fmt.Fprintf(&b, "%s %s\n", l.Addr(i), l.Hostname(i))
	}
	if err := os.WriteFile(hostsPath(l.rec.Lab), b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("emuhost: the hosts' /etc/hosts: %w", err)
	}
	return nil
}

// A holder is the process whose UTS, IPC and mount namespaces are a host's: every Command of the host
// enters them (with nsenter), so all processes of one host share its hostname, its System V IPC, its
// /dev/shm and its /etc/hosts. It is `ip netns exec NS unshare --uts --ipc --mount --propagation slave
// sh -c 'hostname ...; mount -t tmpfs ... /dev/shm; mount --bind <lab>.hosts /etc/hosts; exec sleep
// infinity'`: slave propagation, so that mounts made later on the machine still appear in the host and
// the host's mounts never appear on the machine.
type holder struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

const holderScript = `hostname "$1" && mount -t tmpfs -o "$2" tmpfs /dev/shm && mount --bind "$3" /etc/hosts &&
echo ready && exec sleep infinity </dev/null >/dev/null 2>&1`

func startHolder(ctx context.Context, ns, hostname string, shmBytes int64, hostsFile string) (*holder, error) {
	opts := "mode=1777"
	if shmBytes > 0 {
		opts += ",size=" + strconv.FormatInt(shmBytes, 10)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, "unshare", "--uts", "--ipc", "--mount", "--propagation", "slave",
		"sh", "-c", holderScript, "sh", hostname, opts, hostsFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	step := fmt.Sprintf("start the namespace holder (hostname %s, /dev/shm)", hostname)
	if err := cmd.Start(); err != nil {
		return nil, &StepError{Step: step, Cmd: cmd.String(), Err: err}
	}
	h := &holder{cmd: cmd, done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("said %q, want \"ready\"", line)
		}
		ready <- err
	}()
	t := time.NewTimer(stepTimeout)
	defer t.Stop()
	var rerr error
	select {
	case rerr = <-ready:
	case <-t.C:
		rerr = fmt.Errorf("not ready after %v", stepTimeout)
	case <-ctx.Done():
		rerr = ctx.Err()
	}
	go func() { cmd.Wait(); close(h.done) }()
	if rerr != nil {
		h.kill()
		return nil, &StepError{Step: step, Cmd: cmd.String(), Err: rerr, Stderr: strings.TrimSpace(stderr.String())}
	}
	return h, nil
}

// kill ends the holder's process group and waits (at most stepTimeout) for it.
func (h *holder) kill() error {
	syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-h.done:
		return nil
	case <-time.After(stepTimeout):
		return fmt.Errorf("emuhost: namespace holder pid %d still running %v after SIGKILL", h.cmd.Process.Pid, stepTimeout)
	}
}

// Close removes everything the lab made: it kills every process still in the hosts' namespaces
// (commands left running among them), and deletes the veth pairs, the bridge, the namespaces, the route
// and the lab's record. It is idempotent (a second call returns the first's result) and takes at most
// a minute. Should it fail, the record stays, and the first Create after this process exits retries.
// Commands fail to start after Close; one started just before it may not be in its host yet (nsenter
// enters it after the fork) and escape the kill: end commands (their contexts) before Close.
func (l *Lab) Close() error {
	l.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		l.closeErr = l.teardown(ctx)
	})
	return l.closeErr
}

func (l *Lab) teardown(ctx context.Context) error {
	l.closed.Store(true)
	var errs []error
	for _, h := range l.holders {
		if err := h.kill(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeLab(ctx, &l.rec); err != nil {
		errs = append(errs, fmt.Errorf("emuhost: close lab %s: %w", l.rec.Lab, err))
	}
	return errors.Join(errs...)
}

// ID is the lab's id, the prefix of every name it made ("cpeh<N>").
func (l *Lab) ID() string { return l.rec.Lab }

// Hosts is the number of hosts.
func (l *Lab) Hosts() int { return l.spec.Hosts }

// Subnet is the lab's 10.x.y.0/24.
func (l *Lab) Subnet() netip.Prefix { return l.subnet }

// Bridge is the name of the lab's bridge in the machine's namespace.
func (l *Lab) Bridge() string { return l.rec.Bridge }

func (l *Lab) check(host int) {
	if host < 0 || host >= l.spec.Hosts {
		panic(fmt.Sprintf("emuhost: host %d of a lab of %d hosts", host, l.spec.Hosts))
	}
}

// Addr is host's address, 10.x.y.(host+1). It panics when host is not in [0, Hosts()).
func (l *Lab) Addr(host int) netip.Addr {
	l.check(host)
	a := l.subnet.Addr().As4()
	a[3] = byte(host + 1)
	return netip.AddrFrom4(a)
}

// Hostname is host's hostname, "<Spec.Name>-h<host>". It panics when host is not in [0, Hosts()).
func (l *Lab) Hostname(host int) string {
	l.check(host)
	return fmt.Sprintf("%s-h%d", l.spec.Name, host)
}

// Netns is the name of host's network namespace (ip netns). It panics when host is not in
// [0, Hosts()).
func (l *Lab) Netns(host int) string {
	l.check(host)
	return l.rec.Netns[host]
}

// Link is the name of the bridge end of host's veth pair, in the machine's namespace. It panics when
// host is not in [0, Hosts()).
func (l *Lab) Link(host int) string {
	l.check(host)
	return l.rec.Links[host]
}

// KillHost sends SIGKILL to every process running on host (every process in its network namespace
// but the host's namespace holder, which keeps the host up): the fault "a host's ranks killed". It
// returns how many it signalled. A Command started but not yet in the host (nsenter enters it just
// after the fork) is not among them.
func (l *Lab) KillHost(ctx context.Context, host int) (int, error) {
	if host < 0 || host >= l.spec.Hosts {
		return 0, fmt.Errorf("emuhost: kill host %d of a lab of %d hosts", host, l.spec.Hosts)
	}
	if l.closed.Load() {
		return 0, fmt.Errorf("emuhost: kill host %d: lab %s is closed", host, l.rec.Lab)
	}
	return killNetns(ctx, l.rec.Netns[host], l.holders[host].cmd.Process.Pid)
}

// LinkDown cuts host's link: the bridge end of its veth pair goes down, so the host's HostInterface
// loses its carrier (as on a pulled cable) and every packet to or from the host is dropped; addresses
// and routes stay. Connections through it fail only when their own timeouts fire (TCP_USER_TIMEOUT,
// keepalive).
func (l *Lab) LinkDown(ctx context.Context, host int) error {
	return l.setLink(ctx, host, "down")
}

// LinkUp restores a link LinkDown cut.
func (l *Lab) LinkUp(ctx context.Context, host int) error {
	return l.setLink(ctx, host, "up")
}

func (l *Lab) setLink(ctx context.Context, host int, state string) error {
	if host < 0 || host >= l.spec.Hosts {
		return fmt.Errorf("emuhost: link %s: host %d of a lab of %d hosts", state, host, l.spec.Hosts)
	}
	if l.closed.Load() {
		return fmt.Errorf("emuhost: link %s: lab %s is closed", state, l.rec.Lab)
	}
	_, err := run(ctx, fmt.Sprintf("host %d: link %s", host, state), "ip", "link", "set", l.rec.Links[host], state)
	return err
}
