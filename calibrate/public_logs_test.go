package calibrate

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
)

// decisionLineRE counts TUNING decision lines in a raw log independently of the parser: enqueue.cc's
// "%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}" (2.24+), "%s: %ld Bytes -> Algo %d
// proto %d time %f" (2.23) and "%ld Bytes -> Algo %d proto %d time %f" (2.20-2.22) all hold
// " Bytes -> Algo " followed by the algorithm and " proto ".
var decisionLineRE = regexp.MustCompile(`(?m)\d Bytes -> Algo \w+ proto \w+`)

// TestPublicNCCLLogs reads each stored public TUNING log (testdata/public/logs) as
// `calibrate nccl-log` does: every decision line the regexp above counts in the raw file is one
// Decision, and the agreement --check-decisions can measure is what the log's inputs allow.
func TestPublicNCCLLogs(t *testing.T) {
	for _, tc := range []struct {
		name string
		// decisions is `grep -c "Bytes -> Algo" FILE`, and lines their line numbers (grep -n).
		decisions int
		lines     []int
		cells     []Cell
		// topoErr is why no topology (so no --check-decisions) comes from the log; "" when one does.
		topoErr string
		nRanks  int // what the log's init lines give; 0 where they give nothing
	}{
		{
			// Two runs pasted in one notes file. Neither can be checked against the model: the log has
			// no GRAPH line (nor the model table, nor the "comm ... nRanks ... nNodes" line), so there
			// is no topology to price the decisions on. What a check would also need: line 104 is
			// from the run the notes pin with NCCL_ALGO=Ring NCCL_PROTO=Simple (the log holds no
			// "NCCL_ALGO set by environment" line of its own), so only line 12 is NCCL's model's pick.
			name:      "devopsrustem__slurmv4__tpgds-aihub0007_nccl2.27.5_16ranks.txt",
			decisions: 2,
			lines:     []int{12, 104},
			cells: []Cell{
				{capabilities.AllReduce, capabilities.Tree, capabilities.LL},
				{capabilities.AllReduce, capabilities.Ring, capabilities.Simple},
			},
			topoErr: "no GRAPH line of a known pattern",
			nRanks:  16, // line 86, "ncclCommInitRank comm ... rank 4 nranks 16 ... - Init COMPLETE"
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("testdata", "public", "logs", tc.name)
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Len(t, decisionLineRE.FindAll(raw, -1), tc.decisions, "the regexp's count of the raw file")

			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			lg, err := ParseNCCLLog(path, f)
			require.NoError(t, err)
			assert.Empty(t, lg.Problems)
			require.Len(t, lg.Decisions, tc.decisions, "every decision line read")
			for i, d := range lg.Decisions {
				assert.Equal(t, tc.lines[i], d.Line, "decision %d", i)
				assert.Equal(t, tc.cells[i], Cell{d.Coll, d.Algo, d.Proto}, "decision %d", i)
				assert.Equal(t, Format224, d.Format, "decision %d", i)
			}
			assert.Equal(t, tc.nRanks, max(lg.Comm.NRanks, lg.Comm.InitRanks), "ranks from the init lines")

			_, _, err = lg.TopologyFile()
			if tc.topoErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.topoErr)
				return
			}
			require.NoError(t, err)
		})
	}
}
