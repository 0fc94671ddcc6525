package cuda

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/kernels/cuda/internal/wirelayout"
)

// TestLayoutHeaderCurrent: the committed layout_gen.h is what the generator writes from the
// engine's constants now (run `go generate ./kernels/cuda/` after changing them).
func TestLayoutHeaderCurrent(t *testing.T) {
	want, err := wirelayout.Header()
	require.NoError(t, err)
	got, err := Sources.ReadFile("layout_gen.h")
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "kernels/cuda/layout_gen.h is stale: run go generate ./kernels/cuda/")
}

// TestLayoutHeaderValues checks the header's numbers against the layouts as
// engine/internal/wire/layout.go's comment and NCCL describe them, worked by hand: a connection
// region is 128-byte lines (layout word, head, tail, then the buffers); an LL line is {data 4, flag
// 4, data 4, flag 4}; an LL128 line is 15 data words and the flag; an NVLS region is a layout line,
// three counter lines per member (posted, reduced, done), then every member's up and down buffers;
// dtypes and device operators in ncclDataType_t and ncclDevRedOp_t order.
func TestLayoutHeaderValues(t *testing.T) {
	h, err := Sources.ReadFile("layout_gen.h")
	require.NoError(t, err)
	defs := parseDefines(t, string(h))
	want := map[string]int64{
		"COLLPLAN_REGION_ALIGN": 128, "COLLPLAN_LINE_BYTES": 128, "COLLPLAN_NCCL_STEPS": 8,
		"COLLPLAN_CONN_HEAD_OFF": 1 * 128, "COLLPLAN_CONN_TAIL_OFF": 2 * 128, "COLLPLAN_CONN_BUF_OFF": 3 * 128,
		"COLLPLAN_LL_LINE_BYTES": 16, "COLLPLAN_LL_LINE_PAYLOAD": 8,
		"COLLPLAN_LL128_LINE_BYTES": 128, "COLLPLAN_LL128_LINE_PAYLOAD": 15 * 8, "COLLPLAN_LL128_FLAG_OFF": 15 * 8,
		// member m's counter k at 128*(1+3m+k); up buffers after 128*(1+3n) for n members
		"COLLPLAN_NVLS_CTR_OFF": 128, "COLLPLAN_NVLS_CTR_MEMBER": 3 * 128, "COLLPLAN_NVLS_CTR_K": 128,
		"COLLPLAN_NVLS_POSTED": 0, "COLLPLAN_NVLS_REDUCED": 1, "COLLPLAN_NVLS_DONE": 2,
		"COLLPLAN_NVLS_DATA_OFF": 128, "COLLPLAN_NVLS_DATA_MEMBER": 3 * 128,
		"COLLPLAN_DT_INT8": 0, "COLLPLAN_DT_UINT8": 1, "COLLPLAN_DT_INT32": 2, "COLLPLAN_DT_UINT32": 3,
		"COLLPLAN_DT_INT64": 4, "COLLPLAN_DT_UINT64": 5, "COLLPLAN_DT_FLOAT16": 6, "COLLPLAN_DT_FLOAT32": 7,
		"COLLPLAN_DT_FLOAT64": 8, "COLLPLAN_DT_BFLOAT16": 9, "COLLPLAN_DT_FP8E4M3": 10, "COLLPLAN_DT_FP8E5M2": 11,
		"COLLPLAN_NUM_DTYPES": 12,
		"COLLPLAN_DEVOP_SUM":  0, "COLLPLAN_DEVOP_PROD": 1, "COLLPLAN_DEVOP_MINMAX": 2, "COLLPLAN_DEVOP_PREMULSUM": 3,
		"COLLPLAN_DEVOP_SUMPOSTDIV": 4, "COLLPLAN_NUM_DEVOPS": 5,
	}
	assert.Equal(t, want, defs)
}

// parseDefines reads "#define NAME VALUE" lines.
func parseDefines(t *testing.T, h string) map[string]int64 {
	t.Helper()
	defs := map[string]int64{}
	for i, line := range strings.Split(h, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "#define" {
			continue
		}
		v, err := strconv.ParseInt(f[2], 10, 64)
		require.NoError(t, err, "layout_gen.h line %d", i+1)
		defs[f[1]] = v
	}
	return defs
}
