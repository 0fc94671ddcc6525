// Package wire is the engine's wire room (NCCL's src/device/prims_{simple,ll,ll128}.h and the
// FIFO layout of src/include/device.h): the layouts of the regions ranks share (the control
// region's lines, a connection's head, tail and NCCL_STEPS slots per protocol), one side of a
// connection (Endpoint) with the three protocols' puts and gets on its slots, the release stores
// that publish them, and the bounded polling every wait of the engine goes through (Waiter, over
// the rank's control words, Ctl). It moves bytes within byte regions and knows nothing of calls,
// plans or algorithms. It is internal: the engine re-exports the layout constants other
// implementations of the formats need (engine.LineBytes, ...).
package wire
