// Package matrix is the engine's correctness matrix, shared by the engine's in-process tests
// (engine/matrix_test.go, fullmatrix_test.go) and the across-hosts test of the network transport
// (engine/transport/net/matrix_test.go): the cases (a Space of axes and its pairwise covering set),
// the inputs, the buffers a case hands to the engine (guarded, in place or not as NCCL's
// conventions say) and the oracle that says what every rank's result must be.
//
// The oracle computes each expected element from the inputs alone, in float64 (floats, with a
// tolerance) or exact modular integer arithmetic (integers), never from another engine run. The
// inputs are a function of (seed, rank, index), so a process that runs some of a case's ranks can
// compute every rank's inputs, and with them the expected result of its own ranks, by itself.
//
// It is test support: only tests import it.
package matrix
