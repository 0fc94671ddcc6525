// Package launch is the launcher room (NCCL's mpirun side and its bootstrap, src/bootstrap.cc):
// the Launcher that starts a job's ranks as local processes (and its CollNet endpoint), binds them
// to CPUs, watches them and aborts the job through its shared-memory control region when one dies;
// the rank-process environment (Env, EnvFrom, EnvBind); and the rendezvous protocol over loopback
// TCP that brings the ranks together (Connect; the engine's Join keeps its connections as the
// communicator's Session).
package launch
