// Package collnet is the CollNet network room (NCCL's src/transport/coll_net.cc and a collnet
// plugin with a reducing switch behind it): the aggregation endpoint, a TCP server that reduces
// each step's shares across a job's nodes, or gathers them (iallgather) or reduces and scatters them
// (ireducescatter) (CollNetEndpoint, ListenCollNet, ServeCollNet), its
// framed protocol, and a head's client connection to it (Link), which the engine's CollNetDirect
// and CollNetChain kernels drive step by step.
package collnet
