// Package transport is the seam between the engine and the memory its ranks share (NCCL's
// src/transport.cc and its ncclTransport table): the Transport interface, the names of the regions
// the engine asks for, the in-process transport (InProcess, whose ranks are goroutines of one
// process) and job ids. Each other transport is a package of its own below this one that
// implements Transport (engine/transport/shm: files mapped by rank processes;
// engine/transport/net: ranks on other hosts over TCP, over a local transport for the same host);
// a new one plugs in the same way, through engine.New, which takes any Transport.
package transport
