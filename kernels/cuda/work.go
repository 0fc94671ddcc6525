package cuda

// The kernels' argument structs as the host writes them into device memory: field for field
// common.cuh's cpConn, cpNvls and cpWork (the cuda tag names the C field). Addresses are device
// pointers. TestWorkLayout checks with NVRTC that every offset and size agrees with the C
// structs.

// Conn is common.cuh's cpConn: one side of a connection, a region laid out as
// engine/internal/wire/layout.go says, and the device address of this side's step count.
type Conn struct {
	Region      uint64 `cuda:"region"`
	Step        uint64 `cuda:"step"`
	LLBytes     uint32 `cuda:"llBytes"`
	LL128Bytes  uint32 `cuda:"ll128Bytes"`
	SimpleBytes uint32 `cuda:"simpleBytes"`
	Pad         uint32 `cuda:"pad"`
}

// Nvls is common.cuh's cpNvls: one channel's multicast object (engine.NVLSLayout), this member's
// unicast copy and the multicast address.
type Nvls struct {
	UC        uint64 `cuda:"uc"`
	MC        uint64 `cuda:"mc"`
	Step      uint64 `cuda:"step"`
	Members   uint32 `cuda:"members"`
	Me        uint32 `cuda:"me"`
	StepBytes uint64 `cuda:"stepBytes"`
}

// Work is common.cuh's cpWork: one thread block's job, one rank's share of one channel of one
// call. Counts and offsets are in elements.
type Work struct {
	SendBuff   uint64  `cuda:"sendbuff"`
	RecvBuff   uint64  `cuda:"recvbuff"`
	Count      uint64  `cuda:"count"`
	Lo         uint64  `cuda:"lo"`
	Hi         uint64  `cuda:"hi"`
	ChunkElems uint64  `cuda:"chunkElems"`
	PieceBytes uint64  `cuda:"pieceBytes"`
	OpArg      uint64  `cuda:"opArg"` // kernels.Reducer.Arg
	Abort      uint64  `cuda:"abort"`
	Ring       uint64  `cuda:"ring"`
	DevOp      uint32  `cuda:"devOp"` // kernels.Reducer.DevOp
	NRanks     uint32  `cuda:"nRanks"`
	RingIx     uint32  `cuda:"ringIx"`
	Root       uint32  `cuda:"root"`
	InPlace    uint32  `cuda:"inPlace"`
	TreeUp     uint32  `cuda:"treeUp"`
	NKids      uint32  `cuda:"nKids"`
	Pad        uint32  `cuda:"pad"`
	RingRecv   Conn    `cuda:"ringRecv"`
	RingSend   Conn    `cuda:"ringSend"`
	FromUp     Conn    `cuda:"fromUp"`
	ToUp       Conn    `cuda:"toUp"`
	FromKid    [3]Conn `cuda:"fromKid"`
	ToKid      [3]Conn `cuda:"toKid"`
	Nvls       Nvls    `cuda:"nvls"`
}
