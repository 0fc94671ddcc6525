package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
)

// Launcher names the launcher whose variables gave a process its rank.
type Launcher string

// The launchers FromEnv detects, in the order it tries them (see the package comment).
const (
	Collplan Launcher = "collplan" // the engine's own launcher: COLLPLAN_RANK, COLLPLAN_WORLD_SIZE, COLLPLAN_ADDR
	Torchrun Launcher = "torchrun" // RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK
	Mpirun   Launcher = "mpirun"   // Open MPI: OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE
	Srun     Launcher = "srun"     // Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID
)

var launchers = []Launcher{Collplan, Torchrun, Mpirun, Srun}

// DefaultPort is the rendezvous port of a single-host job whose environment names no address
// (the engine's DefaultRendezvousPort).
const DefaultPort = 29517

// Slurm's derived rendezvous ports lie in [SlurmPortBase, SlurmPortBase+SlurmPortSpan): above the
// privileged ports and below Linux's default ephemeral range (32768-60999), so no outgoing
// connection holds one by chance.
const (
	SlurmPortBase = 20000
	SlurmPortSpan = 10000
)

// MinSecretLen is the shortest COLLPLAN_JOB_SECRET accepted, in bytes.
const MinSecretLen = 16

// Environment variables read by FromEnv besides the launchers' own.
const (
	EnvLauncher = "COLLPLAN_LAUNCHER"   // forces one launcher's variables, skipping the cross-check
	EnvInit     = "COLLPLAN_INIT"       // file:///shared/path or tcp://host:port
	EnvSecret   = "COLLPLAN_JOB_SECRET" // the job secret that authenticates the rendezvous
)

// ErrNoLauncher is FromEnv's error when no launcher's variables name a rank: the process was
// started on its own.
var ErrNoLauncher = errors.New("bootstrap: no launcher's variables name this process's rank")

// ErrEnv is matched (errors.Is) by every error about a malformed or inconsistent environment.
var ErrEnv = errors.New("bootstrap: environment")

// Secret is a job secret. It prints as "[redacted]", so an Identity can be logged.
type Secret string

func (Secret) String() string   { return "[redacted]" }
func (Secret) GoString() string { return "[redacted]" }

// Identity is what a process's environment says about its place in a job.
type Identity struct {
	Rank, Size           int
	LocalRank, LocalSize int      // among the ranks of its node
	Node                 string   // the launcher's node id (GROUP_RANK, SLURM_NODEID), else Host
	Host                 string   // this host's name
	Launcher             Launcher // which launcher's variables gave Rank and Size
	// Rendezvous is how to meet: "host:port" of rank 0's listener, or "file:///path" of a shared
	// file in which rank 0 publishes its address. RendezvousFrom names the variables it came from.
	Rendezvous, RendezvousFrom string
	Job                        string // COLLPLAN_JOB, the engine launcher's job id ("" otherwise)
	Secret                     Secret // COLLPLAN_JOB_SECRET ("" when unset)
}

// IsFile reports whether the rendezvous is a file URL, returning its path.
func (id Identity) IsFile() (string, bool) {
	p, ok := strings.CutPrefix(id.Rendezvous, "file://")
	return p, ok
}

func envErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrEnv}, args...)...)
}

// detected is one launcher's view of the process.
type detected struct {
	launcher             Launcher
	rank, size           int
	localRank, localSize int
	node                 string // "" for the hostname
	rankVar, sizeVar     string
	nodes                int // srun: the step's node count (from SLURM_STEP_TASKS_PER_NODE)
}

type env struct{ lookup func(string) (string, bool) }

// get returns a variable's value, with ok false when it is unset.
func (e env) get(name string) (string, bool) { return e.lookup(name) }

func (e env) has(name string) bool {
	_, ok := e.lookup(name)
	return ok
}

// int reads a non-negative integer variable that must be set.
func (e env) int(name string) (int, error) {
	v, ok := e.lookup(name)
	if !ok {
		return 0, envErr("%s is not set", name)
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, envErr("%s=%q is not a non-negative integer", name, v)
	}
	return n, nil
}

// ranks reads the four rank variables of a launcher and checks them against each other.
func (e env) ranks(l Launcher, rankVar, sizeVar, localVar, localSizeVar string) (detected, error) {
	d := detected{launcher: l, rankVar: rankVar, sizeVar: sizeVar}
	var err error
	if d.rank, err = e.int(rankVar); err != nil {
		return d, err
	}
	if d.size, err = e.int(sizeVar); err != nil {
		return d, err
	}
	if d.localRank, err = e.int(localVar); err != nil {
		return d, err
	}
	if d.localSize, err = e.int(localSizeVar); err != nil {
		return d, err
	}
	switch {
	case d.size < 1:
		return d, envErr("%s=%d: a job has at least one rank", sizeVar, d.size)
	case d.rank >= d.size:
		return d, envErr("%s=%d is not below %s=%d", rankVar, d.rank, sizeVar, d.size)
	case d.localSize < 1 || d.localSize > d.size:
		return d, envErr("%s=%d is not between 1 and %s=%d", localSizeVar, d.localSize, sizeVar, d.size)
	case d.localRank >= d.localSize:
		return d, envErr("%s=%d is not below %s=%d", localVar, d.localRank, localSizeVar, d.localSize)
	}
	return d, nil
}

// detectors read each launcher's variables; present is false when its rank variable is unset.
var detectors = map[Launcher]func(e env) (d detected, present bool, err error){
	Collplan: func(e env) (detected, bool, error) {
		if !e.has("COLLPLAN_RANK") {
			return detected{}, false, nil
		}
		d := detected{launcher: Collplan, rankVar: "COLLPLAN_RANK", sizeVar: "COLLPLAN_WORLD_SIZE"}
		var err error
		if d.rank, err = e.int(d.rankVar); err != nil {
			return d, true, err
		}
		if d.size, err = e.int(d.sizeVar); err != nil {
			return d, true, err
		}
		if d.size < 1 || d.rank >= d.size {
			return d, true, envErr("COLLPLAN_RANK=%d is not below COLLPLAN_WORLD_SIZE=%d", d.rank, d.size)
		}
		// The engine's launcher starts every rank on its own host.
		d.localRank, d.localSize = d.rank, d.size
		return d, true, nil
	},
	Torchrun: func(e env) (detected, bool, error) {
		if !e.has("RANK") {
			return detected{}, false, nil
		}
		d, err := e.ranks(Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
		if err != nil {
			return d, true, err
		}
		if e.has("GROUP_RANK") {
			g, err := e.int("GROUP_RANK")
			if err != nil {
				return d, true, err
			}
			d.node = strconv.Itoa(g)
		}
		return d, true, nil
	},
	Mpirun: func(e env) (detected, bool, error) {
		if !e.has("OMPI_COMM_WORLD_RANK") {
			return detected{}, false, nil
		}
		d, err := e.ranks(Mpirun, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
		return d, true, err
	},
	Srun: func(e env) (detected, bool, error) {
		// A batch script's own environment has SLURM_PROCID but no step: only an srun task has both.
		if !e.has("SLURM_PROCID") || (!e.has("SLURM_STEP_ID") && !e.has("SLURM_STEPID")) {
			return detected{}, false, nil
		}
		d := detected{launcher: Srun, rankVar: "SLURM_PROCID", sizeVar: "SLURM_NTASKS"}
		var err error
		if d.rank, err = e.int("SLURM_PROCID"); err != nil {
			return d, true, err
		}
		if d.size, err = e.int("SLURM_NTASKS"); err != nil {
			return d, true, err
		}
		if d.size < 1 || d.rank >= d.size {
			return d, true, envErr("SLURM_PROCID=%d is not below SLURM_NTASKS=%d", d.rank, d.size)
		}
		if d.localRank, err = e.int("SLURM_LOCALID"); err != nil {
			return d, true, err
		}
		nodeID, err := e.int("SLURM_NODEID")
		if err != nil {
			return d, true, err
		}
		d.node = strconv.Itoa(nodeID)
		tpn, ok := e.get("SLURM_STEP_TASKS_PER_NODE")
		if !ok {
			return d, true, envErr("SLURM_STEP_TASKS_PER_NODE is not set (srun sets it for every task)")
		}
		counts, err := tasksPerNode(tpn)
		if err != nil {
			return d, true, envErr("SLURM_STEP_TASKS_PER_NODE=%q: %v", tpn, err)
		}
		if nodeID >= len(counts) {
			return d, true, envErr("SLURM_NODEID=%d but SLURM_STEP_TASKS_PER_NODE=%q lists %d nodes", nodeID, tpn, len(counts))
		}
		total := 0
		for _, c := range counts {
			total += c
		}
		if total != d.size {
			return d, true, envErr("SLURM_STEP_TASKS_PER_NODE=%q adds up to %d tasks, SLURM_NTASKS=%d", tpn, total, d.size)
		}
		d.localSize, d.nodes = counts[nodeID], len(counts)
		if d.localRank >= d.localSize {
			return d, true, envErr("SLURM_LOCALID=%d is not below node %d's %d tasks (SLURM_STEP_TASKS_PER_NODE=%q)", d.localRank, nodeID, d.localSize, tpn)
		}
		return d, true, nil
	},
}

// FromEnv reads this process's Identity from its environment (lookup is os.LookupEnv in a real
// process) on the host named hostname. See the package comment for the launchers, their order,
// and how the rendezvous address is chosen. It returns ErrNoLauncher when no launcher's variables
// name a rank, and an error matching ErrEnv, naming the variable and its value, for a malformed
// or inconsistent environment.
func FromEnv(lookup func(string) (string, bool), hostname string) (Identity, error) {
	e := env{lookup: lookup}
	if hostname == "" {
		return Identity{}, envErr("empty hostname")
	}
	var found []detected
	if forced, ok := e.get(EnvLauncher); ok {
		l := Launcher(forced)
		detect, known := detectors[l]
		if !known {
			return Identity{}, envErr("%s=%q: want one of %s", EnvLauncher, forced, launcherNames())
		}
		d, present, err := detect(e)
		if err != nil {
			return Identity{}, err
		}
		if !present {
			return Identity{}, envErr("%s=%q but that launcher's rank variable is not set", EnvLauncher, forced)
		}
		found = append(found, d)
	} else {
		for _, l := range launchers {
			d, present, err := detectors[l](e)
			if err != nil {
				return Identity{}, err
			}
			if present {
				found = append(found, d)
			}
		}
	}
	if len(found) == 0 {
		return Identity{}, ErrNoLauncher
	}
	d := found[0]
	// Launchers nest (torchrun under an srun step, mpirun's daemons started by srun): one whose
	// size differs describes an outer level and is ignored. Two that claim the same job size must
	// agree on the rank.
	for _, o := range found[1:] {
		if o.size == d.size && o.rank != d.rank {
			return Identity{}, envErr("%s=%d and %s=%d disagree on this process's rank (both say %d ranks); set %s to the launcher that started it",
				d.rankVar, d.rank, o.rankVar, o.rank, d.size, EnvLauncher)
		}
	}
	id := Identity{
		Rank: d.rank, Size: d.size, LocalRank: d.localRank, LocalSize: d.localSize,
		Node: d.node, Host: hostname, Launcher: d.launcher,
	}
	if id.Node == "" {
		id.Node = hostname
	}
	id.Job, _ = e.get("COLLPLAN_JOB")
	if s, ok := e.get(EnvSecret); ok {
		if len(s) < MinSecretLen {
			return Identity{}, envErr("%s is %d bytes long, want at least %d", EnvSecret, len(s), MinSecretLen)
		}
		id.Secret = Secret(s)
	}
	var err error
	if id.Rendezvous, id.RendezvousFrom, err = rendezvous(e, d); err != nil {
		return Identity{}, err
	}
	return id, nil
}

func launcherNames() string {
	var names []string
	for _, l := range launchers {
		names = append(names, string(l))
	}
	return strings.Join(names, ", ")
}

// rendezvous chooses how the job meets, in this order: COLLPLAN_INIT, COLLPLAN_ADDR,
// NCCL_COMM_ID, MASTER_ADDR with MASTER_PORT, srun's first host of SLURM_STEP_NODELIST, and
// 127.0.0.1:DefaultPort for a job on one host.
func rendezvous(e env, d detected) (addr, from string, err error) {
	if v, ok := e.get(EnvInit); ok {
		addr, err := initURL(v)
		return addr, EnvInit, err
	}
	for _, name := range []string{"COLLPLAN_ADDR", "NCCL_COMM_ID"} {
		if v, ok := e.get(name); ok {
			addr, err := hostPort(name, v)
			return addr, name, err
		}
	}
	port, portFrom, err := masterPort(e)
	if err != nil {
		return "", "", err
	}
	if host, ok := e.get("MASTER_ADDR"); ok {
		if host == "" {
			return "", "", envErr("MASTER_ADDR is set but empty")
		}
		if port == 0 && d.launcher == Srun {
			port, portFrom, err = slurmPort(e)
			if err != nil {
				return "", "", err
			}
		}
		if port == 0 {
			return "", "", envErr("MASTER_ADDR=%q is set without MASTER_PORT", host)
		}
		return net.JoinHostPort(host, strconv.Itoa(port)), "MASTER_ADDR, " + portFrom, nil
	}
	if d.launcher == Srun {
		list, ok := e.get("SLURM_STEP_NODELIST")
		if !ok {
			return "", "", envErr("SLURM_STEP_NODELIST is not set and neither is MASTER_ADDR: rank 0's host is unknown")
		}
		hosts, err := ExpandHostlist(list)
		if err != nil {
			return "", "", fmt.Errorf("%w: SLURM_STEP_NODELIST: %v", ErrEnv, err)
		}
		if len(hosts) != d.nodes {
			tpn, _ := e.get("SLURM_STEP_TASKS_PER_NODE")
			return "", "", envErr("SLURM_STEP_NODELIST=%q names %d hosts, SLURM_STEP_TASKS_PER_NODE=%q %d nodes", list, len(hosts), tpn, d.nodes)
		}
		host := hosts[0]
		if d.rank == 0 && d.node != "0" {
			return "", "", envErr("SLURM_PROCID=0 runs on SLURM_NODEID=%s, not on the first host of SLURM_STEP_NODELIST=%q: set MASTER_ADDR to rank 0's host", d.node, list)
		}
		if port == 0 {
			if port, portFrom, err = slurmPort(e); err != nil {
				return "", "", err
			}
		}
		return net.JoinHostPort(host, strconv.Itoa(port)), "SLURM_STEP_NODELIST, " + portFrom, nil
	}
	if port != 0 {
		return "", "", envErr("%s is set without MASTER_ADDR", portFrom)
	}
	if d.localSize == d.size {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(DefaultPort)), "default (one host)", nil
	}
	return "", "", envErr("%s's job spans hosts (%s=%d, %d on this host) but no variable names rank 0's address: pass MASTER_ADDR and MASTER_PORT (mpirun -x), NCCL_COMM_ID, or %s=file:///shared/path",
		d.launcher, d.sizeVar, d.size, d.localSize, EnvInit)
}

// masterPort reads MASTER_PORT (0 when unset). Under torchrun's agent (TORCHELASTIC_USE_AGENT_STORE
// is "True") MASTER_PORT is the port of the agent's own TCPStore on rank 0's host, so the
// rendezvous takes the next port.
func masterPort(e env) (int, string, error) {
	v, ok := e.get("MASTER_PORT")
	if !ok {
		return 0, "", nil
	}
	p, err := parsePort("MASTER_PORT", v)
	if err != nil {
		return 0, "", err
	}
	if s, _ := e.get("TORCHELASTIC_USE_AGENT_STORE"); s == "True" {
		if p == 65535 {
			return 0, "", envErr("MASTER_PORT=%q: torchrun's agent store holds it and there is no next port", v)
		}
		return p + 1, "MASTER_PORT+1 (torchrun's agent store holds MASTER_PORT)", nil
	}
	return p, "MASTER_PORT", nil
}

// SlurmPort is the rendezvous port every task of a Slurm step derives from its job and step ids
// when MASTER_PORT is unset:
//
//	port = SlurmPortBase + (16*jobID + stepID) mod SlurmPortSpan
//
// so the steps of one job (up to 16 at once) and consecutive jobs get different ports.
func SlurmPort(jobID, stepID uint64) int {
	return SlurmPortBase + int((16*jobID+stepID)%SlurmPortSpan)
}

func slurmPort(e env) (int, string, error) {
	job, ok := e.get("SLURM_JOB_ID")
	name := "SLURM_JOB_ID"
	if !ok {
		job, ok = e.get("SLURM_JOBID")
		name = "SLURM_JOBID"
	}
	if !ok {
		return 0, "", envErr("neither MASTER_PORT nor SLURM_JOB_ID is set: the rendezvous port is unknown")
	}
	j, err := strconv.ParseUint(job, 10, 32)
	if err != nil {
		return 0, "", envErr("%s=%q is not a job id", name, job)
	}
	step, ok := e.get("SLURM_STEP_ID")
	sname := "SLURM_STEP_ID"
	if !ok {
		step, ok = e.get("SLURM_STEPID")
		sname = "SLURM_STEPID"
	}
	if !ok {
		return 0, "", envErr("neither MASTER_PORT nor SLURM_STEP_ID is set: the rendezvous port is unknown")
	}
	s, err := strconv.ParseUint(step, 10, 32)
	if err != nil {
		return 0, "", envErr("%s=%q is not a step id", sname, step)
	}
	return SlurmPort(j, s), name + " and " + sname, nil
}

func parsePort(name, v string) (int, error) {
	p, err := strconv.Atoi(v)
	if err != nil || p < 1 || p > 65535 {
		return 0, envErr("%s=%q is not a port (1-65535)", name, v)
	}
	return p, nil
}

// hostPort checks a "host:port" value (IPv6 hosts in brackets).
func hostPort(name, v string) (string, error) {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return "", envErr("%s=%q: want host:port (an IPv6 host in brackets): %v", name, v, err)
	}
	if host == "" {
		return "", envErr("%s=%q: no host", name, v)
	}
	if _, err := parsePort(name, port); err != nil {
		return "", err
	}
	return v, nil
}

// initURL checks COLLPLAN_INIT: file:///absolute/path, or tcp://host:port.
func initURL(v string) (string, error) {
	u, err := url.Parse(v)
	if err != nil {
		return "", envErr("%s=%q: %v", EnvInit, v, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return "", envErr("%s=%q: a file URL names no host (file:///shared/path)", EnvInit, v)
		}
		if !filepath.IsAbs(u.Path) || u.RawQuery != "" || u.Fragment != "" {
			return "", envErr("%s=%q: want file:///absolute/path", EnvInit, v)
		}
		return "file://" + filepath.Clean(u.Path), nil
	case "tcp":
		if u.Path != "" || u.RawQuery != "" || u.User != nil {
			return "", envErr("%s=%q: want tcp://host:port", EnvInit, v)
		}
		return hostPort(EnvInit, u.Host)
	}
	return "", envErr("%s=%q: want file:///shared/path or tcp://host:port", EnvInit, v)
}
