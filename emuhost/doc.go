// Package emuhost makes emulated hosts on one Linux machine, for multi-host tests and calibration: a
// Lab of H hosts, each a network namespace with its own address on a veth pair to a private bridge,
// its own UTS namespace (hostname "<prefix>-h<i>"), IPC namespace and mount namespace (a private
// tmpfs on /dev/shm), so that between two hosts nothing crosses but the network.
//
// What is isolated: network devices, addresses, routes, ports and sockets (each host has lo and eth0,
// 10.x.y.(i+1)/24, and no default route, so nothing a host sends can leave the lab's subnet; the
// machine's own namespace has an unreachable route to the subnet, so nothing it sends there leaves the
// machine either), the hostname, System V IPC, /dev/shm (shared by every process of one host, seen by
// no other host nor by the machine), and /etc/hosts (the machine's, plus every host's name and
// address, so hosts find each other by name). Bandwidth can be shaped with tc's tbf on both
// directions of each host's link (Spec.RateMbit). A host's link can be cut and restored (LinkDown,
// LinkUp), and its processes killed (KillHost): the faults a multi-host job must survive.
//
// What is not isolated: the kernel (one TCP stack implementation, one set of sysctls outside
// net.*), the clock, the CPUs and memory (hosts compete for the same cores), the file systems but
// /dev/shm and /etc/hosts, /proc's process list (there is no PID namespace: a process in one host can
// see and signal processes of another), and users. The kernel here has no netem, so per-packet
// latency is not emulated by this package.
//
// A Lab records itself in /run/collplan-emuhost/<lab>.json (its owner's pid and start time, the names
// it made). Create first removes the labs whose owner is dead (a killed test or launcher), like stale
// shared-memory segments; the labs of live owners are left alone. Two labs, in one process or in
// two, never share a name or a subnet: Create chooses both under a lock file.
//
// Everything here runs ip(8), tc(8), unshare(1) and nsenter(1) and needs root (CAP_NET_ADMIN and
// CAP_SYS_ADMIN). Every command it runs has a bounded time; an error names the step, the command and
// its stderr.
package emuhost
