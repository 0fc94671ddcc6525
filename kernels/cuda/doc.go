// Package cuda holds the engine's device side: the CUDA C++ kernels (the .cuh and .cu files of
// this directory, embedded as Sources) and their host side in Go, which needs no CUDA to build.
//
// # Device code
//
// One concern per file: common.cuh (argument structs, barriers, waits), reduce.cuh (element-wise
// reduce and copy for every dtype and device operator of package kernels, with NCCL's
// semantics), protocols.cuh (LL, LL128 and Simple in a connection region), primitives.cuh
// (send, recv, recvReduceSend, recvReduceCopy, recvReduceCopySend, recvCopySend, copySend,
// directRecv), ring.cuh (the five collectives), tree.cuh (Tree AllReduce with split up and down
// teams), nvls.cuh (NVLS AllReduce with multimem.ld_reduce and multimem.st, sm_90 and newer
// only) and kernels.cu (the extern "C" entry points, cp_ALGO_COLL_TYPE_PROTO). One thread block
// runs one rank's share of one channel.
//
// # Wire layouts
//
// layout_gen.h is generated from package engine's and package kernels' constants (the
// connection and NVLS region layouts, the line geometry of LL and LL128, the numbering of dtypes
// and device operators), so the device code and the CPU engine share one definition:
//
//	go generate ./kernels/cuda/
//
// TestLayoutHeaderCurrent fails when the committed header differs from what the generator writes.
// The kernels' argument structs have Go mirrors (Work, Conn, Nvls) that TestWorkLayout checks
// against the offsets NVRTC gives the C structs.
//
// # Host side
//
// No cgo: libnvrtc.so.13 and libcuda.so.1 are opened at run time with purego, so a machine
// without CUDA builds and tests everything else. OpenNVRTC (COLLPLAN_NVRTC, else the soname on the
// library path) compiles the sources to PTX (compute_NN) or PTX and cubin (sm_NN, sm_90a), and
// CompileCached keeps the results in an on-disk Cache keyed by the architecture, the NVRTC version
// and a hash of the sources and options (COLLPLAN_CACHE_DIR, else $XDG_CACHE_HOME/collplan/nvrtc).
// OpenDriver fails with ErrNoDriver, "no CUDA driver (libcuda.so.1 not found)", where there is no
// driver. Comm is a GPU communicator of n ranks sharing one device that runs Ring for the five
// collectives and Tree for AllReduce, all of a call's blocks in one launch; it has not run on a GPU yet, and
// bench/gpu/run.sh is prepared to check it (TestGPURing) where one is lent.
package cuda

//go:generate go run ./internal/genlayout layout_gen.h

import "embed"

// Sources are the device code's files, compiled at run time with NVRTC: kernels.cu includes the
// others.
//
//go:embed *.cuh *.cu layout_gen.h
var Sources embed.FS

// MainSource is the name of the translation unit in Sources.
const MainSource = "kernels.cu"
