package report

import (
	"fmt"
	"slices"

	"github.com/collplan/collplan/tables"
)

// SideTable loads a diff side's node table: an embedded NAME or a table FILE (with its overlay
// unless noOverlay), or, when overlay is given (its TOML, from overlayFile), the table alone with
// that overlay applied instead of its own. It returns the table and a label for the report.
func SideTable(nameOrFile string, noOverlay bool, overlayFile string, overlay []byte) (*tables.Node, string, error) {
	embedded := slices.Contains(tables.Names(), nameOrFile)
	var n *tables.Node
	var err error
	base := noOverlay || overlay != nil
	switch {
	case embedded && base:
		n, err = tables.LoadBase(nameOrFile)
	case embedded:
		n, err = tables.Load(nameOrFile)
	case base:
		n, err = tables.LoadFileBase(nameOrFile)
	default:
		n, err = tables.LoadFile(nameOrFile)
	}
	if err != nil {
		return nil, "", err
	}
	label := n.Name
	if !embedded {
		label = n.File
	}
	switch {
	case overlay != nil:
		if n, err = tables.ApplyOverlay(n, overlayFile, overlay); err != nil {
			return nil, "", err
		}
		label += " + overlay " + overlayFile
	case noOverlay:
		label += " (no overlay)"
	case n.Overlay != "":
		label += fmt.Sprintf(" (overlay %s)", n.Overlay)
	}
	return n, label, nil
}
