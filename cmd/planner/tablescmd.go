package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/collplan/collplan/tables"
)

// runTables lists the embedded node tables, or shows one.
func runTables(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tables", stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err}
	}
	switch fs.NArg() {
	case 0:
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "name\tgpu\tgpus/node\tcc\tcpu\tnvls\testimated inputs\toverlay")
		for _, name := range tables.Names() {
			n, err := tables.Load(name)
			if err != nil {
				return err
			}
			nv := "no"
			if n.Node.NVLSSupport {
				nv = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s/%s\t%s\t%d\t%s\n", name, n.Node.GPU, n.Node.GPUsPerNode,
				n.Node.ComputeCapability, n.Node.CPUArch, n.Node.CPUVendor, nv, len(n.Estimated()), orDash(n.Overlay))
		}
		return tw.Flush()
	case 1:
		n, err := tables.Load(fs.Arg(0))
		if err != nil {
			return usageError{err}
		}
		return showTable(stdout, n)
	}
	return usagef("tables takes at most one table name")
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
