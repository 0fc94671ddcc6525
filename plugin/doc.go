// Package plugin runs tuner policies out of process and is the home of collplan's NCCL-facing
// plugin pieces.
//
// # Tuner plugins (hashicorp/go-plugin over gRPC)
//
// A tuner plugin is a separate binary (cmd/tuner-*) that edits the planner's priced menu, NCCL's
// tuner powers over size intervals (planner.Tuner). The protocol is plugin/proto/tuner.proto,
// versioned from the first day: go-plugin's VersionedPlugins with protocol 1, and a magic cookie
// (Handshake) that must never change. A session is:
//
//	Configure(config path)      once per plugin process (repeated after a restart)
//	Init(topology, host model)  once per topology: the plugin may answer with replacement
//	                            costmodel.Constants and correction factors (NCCL's v5 init
//	                            constants); Client.Planner builds the planner with them
//	Tune(topology, class, menu) once per query class: intervals [lo, hi) and their edits
//
// Compiling a DecisionTable for a class is one Tune round trip; the per-collective path (Lookup)
// never calls a plugin. The plugin side prices the class again with the constants and factors the
// host sends, checks the menu is the host's, and hands its policy a real planner.Menu.
//
// On the host, Client implements planner.Tuner. It starts the plugin on first use (start timeout
// 5 s), bounds every call (2 s), and checks every reply: NaN, negative or out-of-range values,
// unknown edit kinds, unsorted or overlapping intervals, and answers that disable every legal cell
// are refused (the planner's own validation then refuses edits that would enable an illegal cell).
// When the plugin crashes, hangs, never completes its handshake or answers with garbage, the call
// returns an error, so the planner uses its built-in policy and notes why; the failure is logged
// once with the plugin's stderr, the plugin is killed and it is restarted on a later call after a
// backoff. A policy's own error (codes InvalidArgument, FailedPrecondition, Unknown) is a fallback
// for that call only. Config.SHA256 pins the binary's SHA-256 when asked.
//
// The host owns the plugin process whole (groupRunner, go-plugin's RunnerFunc): the plugin leads a
// process group of its own, which is killed as a whole, so a script's children, a background child
// or a fork bomb end with it; its stdout and stderr are pipes whose reads end half a second after
// the kill even when a descendant that left the group keeps them open; its standard input is
// /dev/null; its exit is seen by a reaper of the host's, not through the pipes. The start deadline
// covers the process start, go-plugin's handshake and the gRPC connection to the address it names;
// Close and a fault's kill wait at most two seconds for the reap. The socket go-plugin's server
// makes lives in a directory the host makes and removes (and the plugin removes when it finds its
// host gone). The stderr kept for the failure message is a fixed ring (tail).
//
// Commands choose what a failure means: a long-running host (collbench, a service) falls back, as
// above; an offline command reads planner.Prepared.TunerErr and refuses to answer.
//
// A policy is a planner.Tuner (optionally an Initializer) built by a Factory from its
// configuration file; Serve (or RunCommand, which adds -check FILE and a -h documenting the
// configuration format) makes a binary of it, and TestClient runs it in process over go-plugin's
// test connection.
//
// # NCCL tuner shim
//
// The NCCL tuner shim is C (plugin/ncclshim, built by `make shim` into
// build/libnccl-tuner-collplan.so, no Go runtime inside NCCL's process); ncclshim_test.go builds it
// with its C conformance harness, drives it with tables compiled by plugin/shimtable, and runs it
// under valgrind and the address/undefined sanitizers.
package plugin
