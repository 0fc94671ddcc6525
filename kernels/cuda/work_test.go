package cuda

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// layoutFields lists "C path" -> Go offset for every field of t (recursively into struct fields
// and the first element of arrays of structs), and the struct's size under "sizeof".
func layoutFields(t reflect.Type, cpath string, base uintptr, out map[string]uintptr) {
	for i := range t.NumField() {
		f := t.Field(i)
		p := cpath + f.Tag.Get("cuda")
		ft, off := f.Type, base+f.Offset
		out[p] = off
		if ft.Kind() == reflect.Array && ft.Elem().Kind() == reflect.Struct {
			out[p+"[1]"] = off + ft.Elem().Size()
			layoutFields(ft.Elem(), p+"[0].", off, out)
		} else if ft.Kind() == reflect.Struct {
			layoutFields(ft, p+".", off, out)
		}
	}
}

var (
	ptxMovRE = regexp.MustCompile(`mov\.u64\s+(%rd\d+),\s*(\d+);`)
	ptxStRE  = regexp.MustCompile(`st\.volatile\.global\.u64\s+\[%rd\d+(?:\+(\d+))?\],\s*(%rd\d+);`)
)

// TestWorkLayout: the Go mirrors of the kernels' argument structs (work.go) have the C structs'
// sizes and field offsets as NVRTC lays out common.cuh. NVRTC has no offsetof; a probe kernel
// stores each offset (address differences the compiler folds to constants), and the PTX's
// constant stores are read back.
func TestWorkLayout(t *testing.T) {
	n := openNVRTC(t)
	files, err := SourceFiles()
	require.NoError(t, err)
	want := map[string]uintptr{}
	layoutFields(reflect.TypeFor[Work](), "", 0, want)
	paths := make([]string, 0, len(want))
	for p := range want {
		paths = append(paths, p)
	}
	want["sizeof"] = unsafe.Sizeof(Work{})
	paths = append(paths, "sizeof")
	var b strings.Builder
	b.WriteString("#include \"common.cuh\"\nextern \"C\" __global__ void cp_layout_probe(volatile cp_u64* o) {\n  const cpWork* w = (const cpWork*)o;\n")
	for i, p := range paths {
		if p == "sizeof" {
			fmt.Fprintf(&b, "  o[%d] = sizeof(cpWork);\n", i)
			continue
		}
		fmt.Fprintf(&b, "  o[%d] = (cp_u64)((const char*)&w->%s - (const char*)w);\n", i, p)
	}
	b.WriteString("}\n")
	files["layout_probe.cu"] = []byte(b.String())
	out, err := n.Compile(files, "layout_probe.cu", "compute_80")
	require.NoError(t, err)
	regs := map[string]uint64{}
	for _, m := range ptxMovRE.FindAllStringSubmatch(string(out.PTX), -1) {
		regs[m[1]], _ = strconv.ParseUint(m[2], 10, 64)
	}
	got := map[string]uintptr{}
	for _, m := range ptxStRE.FindAllStringSubmatch(string(out.PTX), -1) {
		slot := 0
		if m[1] != "" {
			off, _ := strconv.Atoi(m[1])
			slot = off / 8
		}
		v, ok := regs[m[2]]
		require.True(t, ok, "the probe's store of slot %d is not a constant", slot)
		require.Less(t, slot, len(paths))
		got[paths[slot]] = uintptr(v)
	}
	assert.Equal(t, want, got, "Go offsets (want) against NVRTC's (got)")
	// Worked by hand: 10 8-byte words and 8 4-byte words, 10 connections of 32 bytes (2 pointers,
	// 4 32-bit sizes), then the 40-byte cpNvls.
	assert.Equal(t, uintptr(10*8+8*4+10*32+40), got["sizeof"])
	assert.Equal(t, uintptr(10*8+8*4+10*32), got["nvls"])
}
