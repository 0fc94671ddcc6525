// Package plugin is the home of collplan's NCCL-facing plugin pieces. For now the NCCL tuner
// shim's tests live here: the shim itself is C (plugin/ncclshim, built by `make shim` into
// build/libnccl-tuner-collplan.so, no Go runtime inside NCCL's process), and ncclshim_test.go
// builds it with its C conformance harness, drives it with tables compiled by plugin/shimtable,
// and runs it under valgrind and the address/undefined sanitizers. The go-plugin host comes with a
// later issue.
package plugin
