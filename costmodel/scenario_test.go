package costmodel

import (
	"github.com/collplan/collplan/capabilities"
)

// graph is a searched graph with §13's shared settings (latencyInter 0, sameChannels 1, typeInter
// PIX).
func graph(nCh int, bwIntra, bwInter float64, intra capabilities.PathType) capabilities.Graph {
	return capabilities.Graph{NChannels: nCh, BwIntra: bwIntra, BwInter: bwInter, TypeIntra: intra,
		TypeInter: capabilities.PathPIX, SameChannels: true}
}

// s1 is reference §13 S1: 1 node x 8 GPUs, cc 90, NVSwitch; Tree/Ring nCh 16 bw 20/20 NVL; NVLS
// nCh 8 bw 40/40; comm->nChannels 32, nvlsChannels 16; x86 Intel, pattern 1, no CollNet.
func s1() capabilities.Topology {
	return capabilities.Topology{
		NNodes: 1, NRanks: 8, MinCompCap: 90, MaxCompCap: 90,
		CPUArch: capabilities.ArchX86, CPUVendor: capabilities.VendorIntel,
		NVSCount: 4, NVLSSupport: true, MaxTreePattern: 1, NetDeviceType: capabilities.NetHost,
		CommNChannels: 32, NVLSChannels: 16, MaxLocalRanks: 8, LocalRanks: 8, CUDARTVersion: 12080,
		Graphs: capabilities.Graphs{
			Tree: graph(16, 20, 20, capabilities.PathNVL),
			Ring: graph(16, 20, 20, capabilities.PathNVL),
			NVLS: graph(8, 40, 40, capabilities.PathNVL),
		},
	}
}

// s2 is reference §13 S2: 4 nodes x 8 GPUs (n = 32), cc 90; Tree/Ring nCh 8, bwIntra 20, bwInter
// 12.5; NVLS nCh 8, bwIntra 40, bwInter 25; comm->nChannels 16, nvlsChannels 16.
func s2() capabilities.Topology {
	t := s1()
	t.NNodes, t.NRanks, t.CommNChannels, t.NVLSChannels = 4, 32, 16, 16
	t.Graphs = capabilities.Graphs{
		Tree: graph(8, 20, 12.5, capabilities.PathNVL),
		Ring: graph(8, 20, 12.5, capabilities.PathNVL),
		NVLS: graph(8, 40, 25, capabilities.PathNVL),
	}
	return t
}

// s3 is reference §13 S3: 1 node x 4 GPUs, cc 80, PCIe only: typeIntra PXB, nCh 2, bw 12, no
// NVSwitch, no NVLS; comm->nChannels = min(64, 2*2) = 4.
func s3() capabilities.Topology {
	t := s1()
	t.NRanks, t.MinCompCap, t.MaxCompCap, t.NVSCount, t.NVLSSupport = 4, 80, 80, 0, false
	t.CommNChannels, t.NVLSChannels, t.MaxLocalRanks, t.LocalRanks = 4, 0, 4, 4
	t.Graphs = capabilities.Graphs{
		Tree: graph(2, 12, 12, capabilities.PathPXB),
		Ring: graph(2, 12, 12, capabilities.PathPXB),
	}
	return t
}

func scenario(name string) capabilities.Topology {
	switch name {
	case "S1":
		return s1()
	case "S2":
		return s2()
	}
	return s3()
}

func mustBuild(t *capabilities.Topology) (*Table, error) {
	k := DefaultConstants()
	return Build(t, &k)
}
