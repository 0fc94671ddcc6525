package costmodel

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/collplan/collplan/capabilities"
)

// Release is an NCCL release whose tuning model the cost model can reproduce: 2.19 through 2.30,
// and master. The zero value means Latest (2.30.7, the model collplan reproduces exactly).
type Release struct {
	Major, Minor, Patch int
	// Master is NCCL's master branch: 2.30.7's model (reference §0: master's version.mk is
	// 2.30.7) with the tuner ABI v7 that no release has yet.
	Master bool
}

// Latest is the release the model reproduces by default, NCCL 2.30.7 (reference/nccl-costmodel.md).
var Latest = Release{Major: 2, Minor: 30, Patch: 7}

// Oldest and newest minor releases ParseRelease accepts.
const (
	MinMinor = 19
	MaxMinor = 30
)

// SupportedReleases is the range ParseRelease accepts, for usage texts and errors.
const SupportedReleases = "2.19 .. 2.30 (a bare 2.N is the tag of docs/releases.md: 2.28 is 2.28.3), or master"

// minorTags is the patch a bare "2.N" stands for: the release tag the brief and reference §14 name
// for that minor (v2.19.3-1 ... v2.29.7, v2.30.7).
var minorTags = map[int]int{19: 3, 20: 3, 21: 5, 22: 3, 23: 4, 24: 3, 25: 1, 26: 2, 27: 3, 28: 3, 29: 7, 30: 7}

// ParseRelease parses "2.26", "2.28.9", "v2.28.9-1" or "master". A bare minor is that minor's tag
// (minorTags). Anything else, or a release outside 2.19 .. 2.30, is an error naming the range.
func ParseRelease(s string) (Release, error) {
	in := strings.TrimSpace(s)
	if strings.EqualFold(in, "master") {
		r := Latest
		r.Master = true
		return r, nil
	}
	v := strings.TrimPrefix(strings.TrimPrefix(in, "v"), "V")
	if i := strings.IndexByte(v, '-'); i >= 0 { // the "-1" of a tag name
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Release{}, fmt.Errorf("NCCL release %q: want MAJOR.MINOR[.PATCH] or master (supported: %s)", s, SupportedReleases)
	}
	nums := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return Release{}, fmt.Errorf("NCCL release %q: %q is not a number (supported: %s)", s, p, SupportedReleases)
		}
		nums[i] = n
	}
	r := Release{Major: nums[0], Minor: nums[1]}
	if r.Major != 2 || r.Minor < MinMinor || r.Minor > MaxMinor {
		return Release{}, fmt.Errorf("NCCL release %q is not supported (supported: %s)", s, SupportedReleases)
	}
	if len(nums) == 3 {
		r.Patch = nums[2]
	} else {
		r.Patch = minorTags[r.Minor]
	}
	return r, nil
}

// orLatest is r, or Latest for the zero value.
func (r Release) orLatest() Release {
	if r.Major == 0 {
		return Latest
	}
	return r
}

// IsZero reports whether r is the zero value (Latest by default).
func (r Release) IsZero() bool { return r == Release{} }

// String is "2.28.3", or "master" (Latest for the zero value).
func (r Release) String() string {
	r = r.orLatest()
	if r.Master {
		return "master"
	}
	return fmt.Sprintf("%d.%d.%d", r.Major, r.Minor, r.Patch)
}

// atLeast reports whether r is minor.patch or later (master is after every release).
func (r Release) atLeast(minor, patch int) bool {
	if r.Master {
		return true
	}
	return r.Minor > minor || r.Minor == minor && r.Patch >= patch
}

// Rules are the model rules that changed between releases, as the model and the planner consult
// them. Rules() of Latest is 2.30.7's model; every field names the releases and its source:
// "reference §14" (shared/reference/nccl-costmodel.md), or NVIDIA/nccl's src/graph/tuning.cc read
// at a release commit of the code index (the function and construct named; docs/releases.md lists
// the commits): v2.20.3-1 b6475625, v2.21.5-1 ab2b89c4, v2.22.3-1 178b6b75, v2.23.4-1 a6979c9f,
// v2.24.3-1 6aae3792, v2.25.1-1 80f6bda4. Where a change lies between two read tags, the release it is given to is
// stated as an assumption.
type Rules struct {
	Release Release

	// RingLLQuarter (<= 2.20, reference §14 "Ring LL bw factor"): Ring/LL busBw = min(llMaxBw,
	// busBw/4) when nNodes > 1 or the collective is AllReduce or Reduce, busBw/3 otherwise; 2.21+
	// use min(llMaxBw, busBw*0.5). tuning.cc "Various model refinements": v2.20.3 has the quarter,
	// v2.21.5 the half.
	RingLLQuarter bool
	// RingLL128LowPPN (<= 2.22, reference §14 "Ring LL128 factor"): Ring/LL128 busBw*0.7 when
	// ppn < 2 (one GPU per node), 0.92 otherwise; 2.23+ use 0.92 always (v2.22.3 has the 0.7,
	// v2.24.3 not).
	RingLL128LowPPN bool
	// TreePatternFromGraph (<= 2.25, reference §14 "Tree pattern 0.85"): the Tree 0.85 factor tests
	// the local tree graph's pattern, not comm->maxTreePattern (2.26+). A Topology has one tree
	// graph for every rank, whose pattern is max_tree_pattern, so the two agree here: the rule is
	// recorded, and it cannot change a pick of a homogeneous communicator. v2.25.1 still tests
	// graphs[a]->pattern.
	TreePatternFromGraph bool
	// NVLSBeforeEfficiency (<= 2.27, reference §14 "NVLS model"): NVLS bw = min(bwIntra, bwInter),
	// NVLSTree bw = min(bwIntra, nNodes <= 2 ? bwInter : bwInter/2), no NVLSTree ceiling, and the
	// busBw -> algBw ratio 5/6 for both; 2.28+ use the nvlsEfficiency model and nRanks/nsteps.
	// Every tuning.cc read, v2.20.3 to v2.25.1, has the old model.
	NVLSBeforeEfficiency bool
	// PAT: 0 absent (<= 2.22, reference §14; v2.22.3 ncclTopoTuneModel has no PAT: not modelled,
	// and NCCL_ALGO does not know the name); 1 as in 2.23 (§14, v2.23.4: busBw*0.85, latency
	// assigned 8 + log2i(nNodes)*interLat/3.5 + 2.8*nRanks); 2 as in 2.24-2.27 (busBw*0.75, the
	// latency still assigned, base latency 0: v2.24.3 and v2.25.1 "a == NCCL_ALGO_PAT" latency
	// branch and their 6-row baseLat; through 2.27 assumed); 3 from 2.28 (busBw*0.75, base latency
	// 8.0 plus the same terms: reference §1 and §3, the v5 tuner constants carrying PAT's base).
	PAT int
	// MaxCompCapIndex is the last compCapIndex row of the ceilings: 2 through 2.24 (v2.24.3
	// ncclTopoTuneModel: compCapIndex stops at HOPPER_COMPCAP_IDX, so Blackwell reads Hopper's
	// row), 3 from 2.25 (v2.25.1: BLACKWELL_COMPCAP_IDX, its rows twice Hopper's; reference §14
	// dates the 2x rows to 2.27, the code has them in 2.25.1).
	MaxCompCapIndex int
	// RingInterAllNodes (<= 2.22): multi-node Ring AllReduce latency counts 2*nNodes inter-node
	// steps, not 2*(nNodes-1) (v2.20.3, v2.21.5, v2.22.3 ncclTopoTuneModel "nInterSteps"; v2.23.4
	// and v2.24.3 have 2*(nNodes-1)). Not in reference §14.
	RingInterAllNodes bool
	// InterLatPPN1Tree (2.23+): with one GPU per node every algorithm's inter-node latency is Tree's
	// NET latency (v2.23.4 and v2.24.3 "With ppn=1 latencies are fully exposed"); before, the
	// algorithm's own (v2.22.3 "interLat = hwLat[NCCL_HW_NET][a][p]"). Not in §14.
	InterLatPPN1Tree bool
	// NVLSGatherRatio (<= 2.22): NVLS AllGather/ReduceScatter busBw is converted to algBw too (the
	// 5/6 ratio): the conversion skips only CollNetDirect AllGather/ReduceScatter (v2.22.3 "Convert
	// bus BW to algorithm BW"); from 2.23 (v2.23.4, v2.24.3) it skips every non-Ring
	// AllGather/ReduceScatter.
	// Not in §14.
	NVLSGatherRatio bool
	// NVLSTreeCorrection (2.29+, reference §14 "treeCorrectionFactor"): NVLSTree AllReduce takes
	// treeCorrectionFactor on cc >= 100 x86 (24 columns); before, only Tree (23 columns, bucket 23
	// uncorrected either way).
	NVLSTreeCorrection bool
	// LL128MixedCompCap (2.30+, reference §14 "LL128 mixed compute capability"): the LL128 auto
	// gate also passes mixed compute capabilities when min >= 90; before, min must equal max.
	LL128MixedCompCap bool
	// LL128CompCaps, when not nil, are the only compute capabilities the LL128 auto gate passes
	// (tuning.cc's "switch (minCompCap)"): 70, 80, 90 through 2.24 (v2.20.3, v2.21.5, v2.22.3,
	// v2.23.4, v2.24.3); 70, 80, 90, 100, 120 in 2.25-2.29 (v2.25.1; through 2.29 assumed); nil from 2.30,
	// whose gate is min >= 70 (reference §5). Not in §14.
	LL128CompCaps []int
	// EnvPerFunction (2.24+, reference §14 and §7): NCCL_ALGO/NCCL_PROTO take per-function
	// prefixes and reject unknown names; before, a flat list where unknown tokens are ignored
	// (tuning.cc parseList: flat in v2.22.3, per-function with errors in v2.24.3).
	EnvPerFunction bool
	// LatBatch is the latCount divisor of non-Ring algorithms (reference §14 "latCount batch"):
	// NCCL_MAX_WORK_ELEMENTS = 9 through 2.21 (v2.20.3 ncclTopoGetAlgoTime divides by it; 9 is
	// src/include/device.h's static_assert of that era), NCCL_MAX_DEV_WORK_BATCH_COLLS = 8 from
	// 2.22 (v2.24.3 divides by it; §14 dates it 2.22).
	LatBatch int
	// TreeSimpleChunkShrink (<= 2.19, reference §14): enqueue.cc shrank the Tree/Simple chunk by
	// tree depth. Recorded only: collplan's chunk sizing is 2.20+'s (no shrink) for every release.
	TreeSimpleChunkShrink bool
	// TunerAPI is the newest tuner plugin ABI the release loads (reference §14 "tuner plugin API"):
	// at most v4 through 2.27 (cost table and nChannels; §14 does not say which release added v3
	// and v4), v5 in 2.28-2.29 (init gets the mutable constants), v6 in 2.30 (getChunkSize), v7 on
	// master (tuner_v7.h at 2449986f).
	TunerAPI int
}

// Rules returns the model rules of release r (the zero value: Latest).
func (r Release) Rules() Rules {
	r = r.orLatest()
	ru := Rules{
		Release:               r,
		RingLLQuarter:         !r.atLeast(21, 0),
		RingLL128LowPPN:       !r.atLeast(23, 0),
		TreePatternFromGraph:  !r.atLeast(26, 0),
		NVLSBeforeEfficiency:  !r.atLeast(28, 0),
		PAT:                   3,
		MaxCompCapIndex:       3,
		RingInterAllNodes:     !r.atLeast(23, 0),
		InterLatPPN1Tree:      r.atLeast(23, 0),
		NVLSGatherRatio:       !r.atLeast(23, 0),
		NVLSTreeCorrection:    r.atLeast(29, 0),
		LL128MixedCompCap:     r.atLeast(30, 0),
		EnvPerFunction:        r.atLeast(24, 0),
		LatBatch:              MaxDevWorkBatchColls,
		TreeSimpleChunkShrink: !r.atLeast(20, 0),
		TunerAPI:              4,
	}
	switch {
	case !r.atLeast(25, 0):
		ru.LL128CompCaps = []int{70, 80, 90}
	case !r.atLeast(30, 0):
		ru.LL128CompCaps = []int{70, 80, 90, 100, 120}
	}
	switch {
	case !r.atLeast(23, 0):
		ru.PAT = 0
	case !r.atLeast(24, 0):
		ru.PAT = 1
	case !r.atLeast(28, 0):
		ru.PAT = 2
	}
	if !r.atLeast(25, 0) {
		ru.MaxCompCapIndex = 2
	}
	if !r.atLeast(22, 0) {
		ru.LatBatch = 9
	}
	switch {
	case r.Master:
		ru.TunerAPI = 7
	case r.atLeast(30, 0):
		ru.TunerAPI = 6
	case r.atLeast(28, 0):
		ru.TunerAPI = 5
	}
	return ru
}

// Constants returns release r's default tuner constants: 2.30.7's (DefaultConstants) with the
// values that differ before, each tagged with its releases and source:
//   - Tree/Simple latency: base 0 and hw 28/28/28 (NVLink/PCI/NET) in 2.19-2.22; base 8.4 and hw
//     4.0/4.0/14 from 2.23 (reference §14 "Tree Simple latency"; tuning.cc baseLat and hwLat:
//     v2.20.3, v2.21.5, v2.22.3 have 0 and 28, v2.24.3 and v2.25.1 8.4 and 4.0/4.0/14).
//   - hw NVLink NVLS and NVLSTree Simple latency 23 in 2.19-2.20 (v2.20.3 hwLat), 25 from 2.21
//     (reference §14; v2.22.3 hwLat).
//   - hw NET NVLSTree Simple latency 14 in 2.19-2.28.8 (§14: "2.19-2.28.3"; every hwLat read,
//     v2.20.3 to v2.25.1, has 14; patches 2.28.4-8 are taken as 2.28.3), 20.9 from 2.28.9.
//   - PAT base latency 0 through 2.27 (v2.24.3 and v2.25.1 baseLat have no PAT row; their PAT
//     latency is assigned, see Rules.PAT), 8.0 from 2.28.
//   - llMaxBws Hopper row (index 2): Ampere's 87.7/22.5/19.0 in 2.19-2.20 (v2.20.3 llMaxBws),
//     141/45/35 from 2.21 (v2.21.5 llMaxBws). Not in reference §14.
//   - Blackwell row (index 3) of every ceiling: 2x the Hopper row in 2.25-2.27 (v2.25.1's
//     llMaxBws, perChMaxRingLL128Bws, perChMaxTreeLL128Bws and perChMaxTreeBws write 2*Hopper;
//     reference §14 says 2.27); 2.30's values from 2.28 (reference §14 "explicit (2.28+)") except
//     perChMaxNVLSTreeBws N4: 43.1 in 2.28, 43.8 in 2.29, 80.0 from 2.30 (§14 gives the sequence
//     43.1 -> 43.8 -> 80.0; the first two are assigned to 2.28 and 2.29). Before 2.25 the row is
//     unused (Rules.MaxCompCapIndex).
//
// Values no source shows changing carry over from 2.30.7 unchanged.
func (r Release) Constants() Constants {
	r = r.orLatest()
	k := DefaultConstants()
	if !r.atLeast(23, 0) {
		k.BaseLat[Tree][Simple] = 0
		k.HWLat[HWNVLink][Tree][Simple] = 28
		k.HWLat[HWPCI][Tree][Simple] = 28
		k.HWLat[HWNet][Tree][Simple] = 28
	}
	if !r.atLeast(21, 0) {
		k.HWLat[HWNVLink][NVLS][Simple] = 23
		k.HWLat[HWNVLink][NVLSTree][Simple] = 23
	}
	if !r.atLeast(28, 9) {
		k.HWLat[HWNet][NVLSTree][Simple] = 14
	}
	if !r.atLeast(28, 0) {
		k.BaseLat[PAT] = [NumProtos]float64{0, 0, 0}
	}
	if !r.atLeast(21, 0) {
		k.LLMaxBws[2] = k.LLMaxBws[1]
	}
	switch {
	case !r.atLeast(28, 0):
		for _, t := range []*[4][3]float64{&k.LLMaxBws, &k.PerChMaxRingLL128Bws, &k.PerChMaxTreeLL128Bws,
			&k.PerChMaxTreeBws, &k.PerChMaxNVLSTreeBws} {
			for j := range t[3] {
				t[3][j] = 2 * t[2][j]
			}
		}
	case !r.atLeast(29, 0):
		k.PerChMaxNVLSTreeBws[3][2] = 43.1
	case !r.atLeast(30, 0):
		k.PerChMaxNVLSTreeBws[3][2] = 43.8
	}
	return k
}

// Legality is the part of the rules that capabilities' enable resolution consults.
func (ru *Rules) Legality() capabilities.Legality {
	return capabilities.Legality{FlatEnvLists: !ru.EnvPerFunction, NoPAT: ru.PAT == 0, LL128SameCompCap: !ru.LL128MixedCompCap,
		LL128CompCaps: ru.LL128CompCaps}
}
