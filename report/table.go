package report

import "github.com/collplan/collplan/tables"

// Table is one node table as planner tables --json shows it: the list's columns; File, Fabric,
// Sources and Emulation only when one table is shown.
type Table struct {
	Name              string            `json:"name"`
	GPU               string            `json:"gpu"`
	GPUsPerNode       int               `json:"gpus_per_node"`
	ComputeCapability int               `json:"compute_capability"`
	CPUArch           string            `json:"cpu_arch"`
	CPUVendor         string            `json:"cpu_vendor"`
	NVLS              bool              `json:"nvls"`
	EstimatedInputs   int               `json:"estimated_inputs"`
	Overlay           string            `json:"overlay"`
	Fabric            string            `json:"fabric,omitempty"` // with NAME --fabric F: F's file
	File              string            `json:"file,omitempty"`
	Sources           map[string]string `json:"sources,omitempty"`
	// Emulation is an emulated node's [emulation] (shown alone only; absent on real hardware).
	Emulation *tables.Emulation `json:"emulation,omitempty"`
}

// NewTable is n's row of the list (no file, fabric or sources).
func NewTable(n *tables.Node) Table {
	return Table{Name: n.Name, GPU: n.Node.GPU, GPUsPerNode: n.Node.GPUsPerNode,
		ComputeCapability: n.Node.ComputeCapability, CPUArch: n.Node.CPUArch, CPUVendor: n.Node.CPUVendor,
		NVLS: n.Node.NVLSSupport, EstimatedInputs: len(n.Estimated()), Overlay: n.Overlay}
}

// NewTableDetail is n shown alone: its row with its file, fabric file, sources and emulation.
func NewTableDetail(n *tables.Node) Table {
	t := NewTable(n)
	t.File, t.Sources, t.Emulation = n.File, n.Sources, n.Emulation
	if n.Fabric != nil {
		t.Fabric = n.Fabric.File
	}
	return t
}
