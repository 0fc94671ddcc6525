package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/collplan/collplan/report"
	"github.com/collplan/collplan/tables"
)

// runTables lists the embedded node tables, or shows one; --json prints them as JSON. The name
// may come before or after the flags.
func runTables(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tables", stderr)
	asJSON := fs.Bool("json", false, "print JSON: the list as one array of objects, or NAME's table as one object")
	fabric := fs.String("fabric", "", "with NAME: show the node table with this fabric table (an embedded name or a FILE.toml) composed in")
	fabrics := fs.Bool("fabrics", false, "list the fabric tables (--fabric NAME) instead of the node tables")
	if err := parseQuiet(fs, args); err != nil {
		return err
	}
	var names []string
	for rest := fs.Args(); len(rest) > 0; rest = fs.Args() {
		names = append(names, rest[0])
		if err := parseQuiet(fs, rest[1:]); err != nil {
			return err
		}
	}
	if len(names) > 1 {
		return flagError("tables", fmt.Errorf("at most one table name, got %q", names))
	}
	if *fabrics {
		if len(names) > 0 || *fabric != "" {
			return flagError("tables", fmt.Errorf("--fabrics takes no table name and no --fabric"))
		}
		return listFabrics(stdout, *asJSON)
	}
	if *fabric != "" && len(names) == 0 {
		return flagError("tables", fmt.Errorf("--fabric needs a node table NAME to compose it with"))
	}
	if len(names) == 1 {
		n, err := tables.Load(names[0])
		if err != nil {
			return usageError{err}
		}
		if n, _, err = withFabric(n, *fabric); err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(stdout, report.NewTableDetail(n))
		}
		return showTable(stdout, n)
	}
	var list []report.Table
	for _, name := range tables.Names() {
		n, err := tables.Load(name)
		if err != nil {
			return err
		}
		list = append(list, report.NewTable(n))
	}
	if *asJSON {
		return writeJSON(stdout, list)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tgpu\tgpus/node\tcc\tcpu\tnvls\testimated inputs\toverlay")
	for _, t := range list {
		nv := "no"
		if t.NVLS {
			nv = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s/%s\t%s\t%d\t%s\n", t.Name, t.GPU, t.GPUsPerNode,
			t.ComputeCapability, t.CPUArch, t.CPUVendor, nv, t.EstimatedInputs, orDash(t.Overlay))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nfabrics (--fabric NAME; planner tables --fabrics):")
	return listFabrics(stdout, false)
}

// fabricJSONRow is one fabric table in planner tables --fabrics --json.
type fabricJSONRow struct {
	Name             string  `json:"name"`
	Description      string  `json:"description"`
	NICGbps          float64 `json:"nic_gbps"`
	NICsPerNode      int     `json:"nics_per_node"`
	NICsPerNetDevice int     `json:"nics_per_net_device"`
	NetDeviceGBps    float64 `json:"net_device_gbps"`
	TypeInter        string  `json:"type_inter"`
	LatencyInterUS   float64 `json:"latency_inter_us"`
	NetDeviceType    string  `json:"net_device_type"`
}

// listFabrics lists the embedded fabric tables, as a table or one JSON array.
func listFabrics(w io.Writer, asJSON bool) error {
	var rows []fabricJSONRow
	for _, name := range tables.FabricNames() {
		f, err := tables.LoadFabric(name)
		if err != nil {
			return err
		}
		fi := f.Fabric
		rows = append(rows, fabricJSONRow{Name: f.Name, Description: fi.Description, NICGbps: fi.NICGbps,
			NICsPerNode: fi.NICsPerNode, NICsPerNetDevice: fi.NICsPerNetDevice, NetDeviceGBps: fi.NetDeviceGBps(),
			TypeInter: fi.TypeInter, LatencyInterUS: fi.LatencyInterUS, NetDeviceType: fi.NetDeviceType})
	}
	if asJSON {
		return writeJSON(w, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tnics/node\tGb/s per nic\tnet devices\tGB/s per device\ttype_inter\tlatency_inter us\tnet device")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%g\t%d\t%g\t%s\t%g\t%s\n", r.Name, r.NICsPerNode, r.NICGbps,
			r.NICsPerNode/r.NICsPerNetDevice, r.NetDeviceGBps, r.TypeInter, r.LatencyInterUS, r.NetDeviceType)
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func showTable(w io.Writer, n *tables.Node) error {
	fmt.Fprintf(w, "%s (%s)\n", n.Name, n.File)
	fmt.Fprintf(w, "  gpu %s x%d, compute capability %d, cpu %s/%s, nvs_count %d, nvls %v, net %s\n",
		n.Node.GPU, n.Node.GPUsPerNode, n.Node.ComputeCapability, n.Node.CPUArch, n.Node.CPUVendor,
		n.Node.NVSCount, n.Node.NVLSSupport, n.Node.NetDeviceType)
	if n.Node.Note != "" {
		fmt.Fprintf(w, "  note: %s\n", n.Node.Note)
	}
	if n.Overlay != "" {
		fmt.Fprintf(w, "  fitted overlay: %s\n", n.Overlay)
	}
	if e := n.Emulation; e != nil {
		fmt.Fprintf(w, "  emulates: multicast switch %v (nvls_efficiency %g), reducing network %v\n",
			e.MulticastSwitch, e.NVLSEfficiency, e.ReducingNetwork)
	}
	if n.Fabric != nil {
		fmt.Fprintf(w, "  fabric: %s (%s): the inter-node values of every scale above 1\n", n.Fabric.File, n.Fabric.Fabric.Description)
	}
	keys := make([]string, 0, len(n.Scale))
	for k := range n.Scale {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, k := range keys {
		s := n.Scale[k]
		fmt.Fprintf(tw, "  scale %s\tcomm_n_channels %d\tnvls_channels %d\n", k, s.CommNChannels, s.NVLSChannels)
		gs := make([]string, 0, len(s.Graphs))
		for g := range s.Graphs {
			gs = append(gs, g)
		}
		slices.Sort(gs)
		for _, g := range gs {
			gr := s.Graphs[g]
			fmt.Fprintf(tw, "    %s\tn_channels %d\tbw %g/%g\ttype %s/%s\tlatency_inter %g\tsame_channels %v\n",
				g, gr.NChannels, gr.BwIntra, gr.BwInter, gr.TypeIntra, gr.TypeInter, gr.LatencyInter, gr.SameChannels)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	paths := make([]string, 0, len(n.Sources))
	for p := range n.Sources {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	fmt.Fprintln(w, "  sources:")
	for _, p := range paths {
		fmt.Fprintf(w, "    %-48s %s\n", p, n.Sources[p])
	}
	if len(n.Provenance.Sources) > 0 {
		fmt.Fprintf(w, "  provenance: %s\n", strings.Join(n.Provenance.Sources, "; "))
	}
	return nil
}
