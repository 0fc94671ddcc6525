package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/collplan/collplan/bootstrap"
	"github.com/collplan/collplan/engine/launch"
)

// A job that torchrun, srun or mpirun started across hosts: every rank is one collbench process
// that its launcher started (no collbench launcher), its identity and rendezvous read from the
// launcher's variables (bootstrap.FromEnv), and the job runs as --hosts --rank-processes does, on
// real hosts: shm among a host's ranks, the network transport between hosts, a proxy per rank,
// priced with the cpu-net node table. A job on one host keeps the loopback path (engine/launch),
// whose rendezvous connections stay open and so notice a dead host-mate at once.

// acrossHosts reports whether this process is a rank of a launcher's job that spans more than one
// host, with its identity. A process started by collbench's own launchers, or run in process, is
// not. An environment that bootstrap cannot read but engine/launch can (a launcher's rank and size
// without its local variables, on one host) is left to engine/launch; one that neither can read is
// bootstrap's error, which names the variable.
func (o *options) acrossHosts() (bootstrap.Identity, bool, error) {
	if o.transport == "inproc" || o.hosts != 0 || os.Getenv("COLLPLAN_RANK") != "" || os.Getenv(envHostsRank) != "" {
		return bootstrap.Identity{}, false, nil
	}
	hostname, err := os.Hostname()
	if err != nil {
		return bootstrap.Identity{}, false, fmt.Errorf("this host's name: %w", err)
	}
	id, err := bootstrap.FromEnv(os.LookupEnv, hostname)
	switch {
	case errors.Is(err, bootstrap.ErrNoLauncher):
		return id, false, nil
	case err != nil:
		return id, false, err
	}
	return id, id.LocalSize < id.Size, nil
}

// checkAcrossHosts validates the flags for a launcher's job across hosts, as checkHosts does for
// emulated ones, and fixes the ranks per node to the launcher's.
func (o *options) checkAcrossHosts(id bootstrap.Identity) error {
	switch {
	case o.np != 0 && o.np != id.Size:
		return fmt.Errorf("-np %d, but the environment (%s, %s) says %d ranks", o.np, id.Launcher, id.RendezvousFrom, id.Size)
	case id.Size%id.LocalSize != 0:
		return fmt.Errorf("%d ranks with %d on this host (%s): the network transport wants the same number of ranks on every host", id.Size, id.LocalSize, id.Launcher)
	case o.rpn != 0 && o.rpn != id.LocalSize:
		return fmt.Errorf("--ranks-per-node %d, but the launcher (%s) put %d ranks on this host (the network transport's nodes are the hosts)", o.rpn, id.Launcher, id.LocalSize)
	case o.device != "cpu":
		return errors.New("a job across hosts runs the engine on CPUs (--device cpu)")
	case o.pinsCollNet():
		return fmt.Errorf("--algo %s: CollNet is not run with rank processes across hosts", o.algo)
	}
	o.rpn, o.netHosts = id.LocalSize, id.Size/id.LocalSize
	return nil
}

// runLaunched is one rank of a launcher's job across hosts.
func runLaunched(ctx context.Context, o *options, id bootstrap.Identity, stdout, stderr io.Writer) error {
	return runNetRank(ctx, o, netRank{id: id, host: -1,
		transport: fmt.Sprintf("net (%d hosts x %d rank processes from %s, TCP between hosts, shm inside, a proxy per rank)", o.netHosts, o.rpn, id.Launcher)},
		stdout, stderr)
}

// oneHostEnv is engine/launch's Env for a launcher's job on one host: the rank and size, and the
// rendezvous on loopback (every rank is on this host) at bootstrap's port, or with a file
// rendezvous at engine/launch's default port.
func oneHostEnv(id bootstrap.Identity) (launch.Env, error) {
	port := strconv.Itoa(launch.DefaultRendezvousPort)
	if _, file := id.IsFile(); !file {
		var err error
		if _, port, err = net.SplitHostPort(id.Rendezvous); err != nil {
			return launch.Env{}, fmt.Errorf("rendezvous %q (%s): %w", id.Rendezvous, id.RendezvousFrom, err)
		}
	}
	return launch.Env{Rank: id.Rank, Size: id.Size, Addr: net.JoinHostPort("127.0.0.1", port), Job: id.Job, Source: string(id.Launcher)}, nil
}
