package costmodel

// Hardware latency classes (NCCL's NCCL_HW_*), the first index of Constants.HWLat.
const (
	HWNVLink = 0
	HWPCI    = 1
	HWNet    = 2
	NumHW    = 3
)

// Constants are NCCL's tuner constants (ncclTunerConstants_v5_t), which a v5/v6 tuner plugin may
// overwrite before the model is built. Latencies are in us, bandwidth ceilings in GB/s.
// Ceiling rows are indexed by compCapIndex (or, for LLMaxBws, by reference §0's index1) and
// columns by the scale index (N1, N2, N4).
type Constants struct {
	BaseLat              [NumAlgos][NumProtos]float64
	HWLat                [NumHW][NumAlgos][NumProtos]float64
	LLMaxBws             [4][3]float64
	PerChMaxRingLL128Bws [4][3]float64
	PerChMaxTreeLL128Bws [4][3]float64
	PerChMaxTreeBws      [4][3]float64
	PerChMaxNVLSTreeBws  [4][3]float64
}

// DefaultConstants returns NCCL 2.30.7's defaults (reference/nccl-costmodel.md §1).
//
// Provenance: baseLatencies, hwLatencies and the per-architecture ceilings of tuning.cc as tabulated
// in §1; llMaxBws row 3 is written in NCCL as twice row 2.
func DefaultConstants() Constants {
	return Constants{
		BaseLat: [NumAlgos][NumProtos]float64{
			Tree: {6.8, 14.0, 8.4}, Ring: {6.6, 14.0, 8.4},
			CollNetDirect: {0, 0, 0}, CollNetChain: {0, 0, 0},
			NVLS: {0, 0, 0}, NVLSTree: {0, 0, 0}, PAT: {8.0, 8.0, 8.0},
		},
		HWLat: [NumHW][NumAlgos][NumProtos]float64{
			HWNVLink: {
				Tree: {.6, 1.25, 4.0}, Ring: {.6, 1.9, 3.4},
				CollNetDirect: {0, 0, 3.7}, CollNetChain: {0, 0, 2.8},
				NVLS: {0, 0, 25}, NVLSTree: {0, 0, 25}, PAT: {0, 0, 4.0},
			},
			HWPCI: {
				Tree: {1.0, 1.9, 4.0}, Ring: {1.0, 2.5, 5.7},
				CollNetDirect: {0, 0, 3.7}, CollNetChain: {0, 0, 2.8},
				NVLS: {0, 0, 0}, NVLSTree: {0, 0, 0}, PAT: {0, 0, 4.0},
			},
			HWNet: {
				Tree: {5.0, 8.5, 14}, Ring: {2.7, 4.0, 14.0},
				CollNetDirect: {0, 0, 31}, CollNetChain: {0, 0, 30},
				NVLS: {0, 0, 18}, NVLSTree: {0, 0, 20.9}, PAT: {0, 0, 14},
			},
		},
		LLMaxBws: [4][3]float64{
			{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {2 * 141.0, 2 * 45.0, 2 * 35.0},
		},
		PerChMaxRingLL128Bws: [4][3]float64{
			{20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 36.7}, {40.0, 40.0, 40.0},
		},
		PerChMaxTreeLL128Bws: [4][3]float64{
			{20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0},
		},
		PerChMaxTreeBws: [4][3]float64{
			{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0},
		},
		PerChMaxNVLSTreeBws: [4][3]float64{
			{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0.0, 57.7, 45.5}, {0.0, 96.0, 80.0},
		},
	}
}

// nvlsEfficiency is tuning.cc's per-compCapIndex NVLS efficiency {0, 0, 0.85, 0.74} (reference §2),
// a file constant that tuner plugins cannot change.
func nvlsEfficiency(compCapIndex int) float64 {
	switch compCapIndex {
	case 2:
		return 0.85
	case 3:
		return 0.74
	}
	return 0
}
