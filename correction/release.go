package correction

import "github.com/collplan/collplan/costmodel"

// ForRelease returns the factors as NCCL release r applies them: fs itself for 2.29 and later;
// before 2.29 (costmodel.Rules.NVLSTreeCorrection false, reference §14 "treeCorrectionFactor")
// a copy whose NVLSTree rows from NCCL's table (SourceNCCL) are removed, since those releases
// correct Tree only. Rows a node table set stay.
func (fs *Factors) ForRelease(r costmodel.Release) *Factors {
	if fs == nil || r.Rules().NVLSTreeCorrection {
		return fs
	}
	out := *fs
	for c := range out.src {
		for p := range out.src[c][costmodel.NVLSTree] {
			if out.src[c][costmodel.NVLSTree][p] == SourceNCCL {
				out.src[c][costmodel.NVLSTree][p] = SourceNone
				out.f[c][costmodel.NVLSTree][p] = [NumBuckets]float32{}
			}
		}
	}
	return &out
}
