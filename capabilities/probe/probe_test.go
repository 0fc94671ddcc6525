package probe

import (
	"context"
	"errors"
	"fmt"
	"github.com/collplan/collplan/capabilities"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCPUInfoFixtures(t *testing.T) {
	tests := []struct {
		file   string
		arch   capabilities.CPUArch
		vendor capabilities.CPUVendor
		model  string
		cores  int
	}{
		{"intel_xeon_8480.txt", capabilities.ArchX86, capabilities.VendorIntel, "Intel(R) Xeon(R) Platinum 8480+", 8},
		{"amd_epyc_9654_2s.txt", capabilities.ArchX86, capabilities.VendorAMD, "AMD EPYC 9654 96-Core Processor", 8},
		{"hygon_c86.txt", capabilities.ArchX86, capabilities.VendorAMD, "Hygon C86 7285 32-core Processor", 2},
		{"zhaoxin_kx6000.txt", capabilities.ArchX86, capabilities.VendorZhaoxin, "ZHAOXIN KaiXian KX-U6780A@2.7GHz", 2},
		{"mixed_intel_amd.txt", capabilities.ArchX86, capabilities.VendorMixed, "Intel(R) Xeon(R) Platinum 8480+ / AMD EPYC 9654 96-Core Processor", 3},
		{"arm_neoverse_v2.txt", capabilities.ArchARM, capabilities.VendorUndefined, "ARM Neoverse-V2", 4},
		{"power9.txt", capabilities.ArchPower, capabilities.VendorUndefined, "POWER9, altivec supported", 4},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", "cpuinfo", tc.file))
			require.NoError(t, err)
			defer f.Close()
			arch, vendor, model, cores, err := ParseCPUInfo(f)
			require.NoError(t, err)
			assert.Equal(t, tc.arch, arch, "arch")
			assert.Equal(t, tc.vendor, vendor, "vendor (got %v, want %v)", vendor, tc.vendor)
			assert.Equal(t, tc.model, model, "model")
			assert.Equal(t, tc.cores, cores, "cores")
		})
	}
}

func TestParseCPUInfoGOARCHFallback(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "cpuinfo", "riscv_u74.txt"))
	require.NoError(t, err)
	for _, tc := range []struct {
		goarch string
		arch   capabilities.CPUArch
	}{{"amd64", capabilities.ArchX86}, {"386", capabilities.ArchX86}, {"ppc64", capabilities.ArchPower}, {"ppc64le", capabilities.ArchPower}, {"arm64", capabilities.ArchARM}, {"arm", capabilities.ArchARM}} {
		arch, vendor, model, cores, err := parseCPUInfo(strings.NewReader(string(data)), tc.goarch)
		require.NoError(t, err, tc.goarch)
		assert.Equal(t, tc.arch, arch, tc.goarch)
		assert.Equal(t, capabilities.VendorUndefined, vendor, tc.goarch)
		assert.Equal(t, "", model, tc.goarch)
		assert.Equal(t, 2, cores, tc.goarch)
	}
	_, _, _, _, err = parseCPUInfo(strings.NewReader(string(data)), "riscv64")
	assert.ErrorContains(t, err, `"riscv64"`)

	// ParseCPUInfo falls back to this binary's GOARCH.
	want, werr := archFromGOARCH(runtime.GOARCH)
	arch, _, _, _, err := ParseCPUInfo(strings.NewReader(string(data)))
	if werr != nil {
		assert.Error(t, err)
	} else {
		require.NoError(t, err)
		assert.Equal(t, want, arch)
	}
}

func TestParseCPUInfoInline(t *testing.T) {
	x86 := func(vendors ...string) string {
		var b strings.Builder
		for i, v := range vendors {
			fmt.Fprintf(&b, "processor\t: %d\nvendor_id\t: %s\nmodel name\t: cpu %d\n\n", i, v, i%2)
		}
		return b.String()
	}
	arm := func(impl, part string) string {
		s := "processor\t: 0\nBogoMIPS\t: 50.00\n"
		if impl != "" {
			s += "CPU implementer\t: " + impl + "\n"
		}
		s += "CPU architecture: 8\n"
		if part != "" {
			s += "CPU part\t: " + part + "\n"
		}
		return s
	}
	tests := []struct {
		name   string
		in     string
		arch   capabilities.CPUArch
		vendor capabilities.CPUVendor
		model  string
		cores  int
	}{
		{"unknown x86 vendor", x86("GenuineTMx86"), capabilities.ArchX86, capabilities.VendorUndefined, "cpu 0", 1},
		{"AMD and Hygon are both AMD", x86("AuthenticAMD", "HygonGenuine"), capabilities.ArchX86, capabilities.VendorAMD, "cpu 0 / cpu 1", 2},
		{"Centaur and Shanghai are both Zhaoxin", x86("CentaurHauls", "  Shanghai  "), capabilities.ArchX86, capabilities.VendorZhaoxin, "cpu 0 / cpu 1", 2},
		{"known and unknown vendor", x86("GenuineIntel", "GenuineIntel", "unknown"), capabilities.ArchX86, capabilities.VendorMixed, "cpu 0 / cpu 1", 3},
		{"Intel across sockets", x86("GenuineIntel", "GenuineIntel"), capabilities.ArchX86, capabilities.VendorIntel, "cpu 0 / cpu 1", 2},
		{"x86 without vendor_id falls back", "processor : 0\nflags : fpu\n", archOr(t, runtime.GOARCH), capabilities.VendorUndefined, "", 1},
		{"Neoverse-N1", arm("0x41", "0xd0c"), capabilities.ArchARM, capabilities.VendorUndefined, "ARM Neoverse-N1", 1},
		{"Ampere Altra", arm("0x41", "0xd0c"), capabilities.ArchARM, capabilities.VendorUndefined, "ARM Neoverse-N1", 1},
		{"known implementer, unknown part", arm("0x41", "0xd0b"), capabilities.ArchARM, capabilities.VendorUndefined, "ARM part 0xd0b", 1},
		{"unknown implementer", arm("0x99", "0x001"), capabilities.ArchARM, capabilities.VendorUndefined, "implementer 0x99 part 0x001", 1},
		{"implementer without part", arm("0x4E", ""), capabilities.ArchARM, capabilities.VendorUndefined, "NVIDIA", 1},
		{"architecture only", arm("", ""), capabilities.ArchARM, capabilities.VendorUndefined, "", 1},
		{"armv7 model name", "processor\t: 0\nmodel name\t: ARMv7 Processor rev 4 (v7l)\nCPU implementer\t: 0x41\nCPU part\t: 0xd03\n" +
			"processor\t: 1\nmodel name\t: ARMv7 Processor rev 4 (v7l)\n", capabilities.ArchARM, capabilities.VendorUndefined, "ARMv7 Processor rev 4 (v7l)", 2},
		{"old ARM Processor line is not a CPU", "Processor\t: ARMv7 Processor rev 10 (v7l)\nprocessor\t: 0\nCPU architecture: 7\n", capabilities.ArchARM, capabilities.VendorUndefined, "", 1},
		{"PPC970", "processor\t: 0\ncpu\t\t: PPC970MP, altivec supported\n", capabilities.ArchPower, capabilities.VendorUndefined, "PPC970MP, altivec supported", 1},
		{"POWER10 lower case", "processor\t: 0\ncpu\t\t: power10 (architected), altivec supported\n", capabilities.ArchPower, capabilities.VendorUndefined, "power10 (architected), altivec supported", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			arch, vendor, model, cores, err := ParseCPUInfo(strings.NewReader(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.arch, arch, "arch")
			assert.Equal(t, tc.vendor, vendor, "vendor (got %v, want %v)", vendor, tc.vendor)
			assert.Equal(t, tc.model, model, "model")
			assert.Equal(t, tc.cores, cores, "cores")
		})
	}
}

// archOr is the GOARCH fallback for this test binary, skipping where there is none.
func archOr(t *testing.T, goarch string) capabilities.CPUArch {
	a, err := archFromGOARCH(goarch)
	if err != nil {
		t.Skipf("GOARCH %s has no NCCL CPU class", goarch)
	}
	return a
}

func TestParseCPUInfoErrors(t *testing.T) {
	empty, err := os.ReadFile(filepath.Join("testdata", "cpuinfo", "empty.txt"))
	require.NoError(t, err)
	for name, in := range map[string]string{
		"empty":          string(empty),
		"no processors":  "vendor_id : GenuineIntel\nmodel name : Xeon\n",
		"bad processor":  "processor : zero\nvendor_id : GenuineIntel\n",
		"line too long":  "processor : 0\nflags : " + strings.Repeat("x", 2<<20) + "\n",
		"no colon lines": "this is not cpuinfo\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, vendor, model, cores, err := ParseCPUInfo(strings.NewReader(in))
			assert.Error(t, err)
			assert.Equal(t, capabilities.VendorUndefined, vendor)
			assert.Equal(t, "", model)
			assert.Equal(t, 0, cores)
		})
	}
	_, _, _, _, err = ParseCPUInfo(iotest.ErrReader(errors.New("disk on fire")))
	assert.ErrorContains(t, err, "disk on fire")
}

func TestArchFromGOARCH(t *testing.T) {
	for goarch, want := range map[string]capabilities.CPUArch{"amd64": capabilities.ArchX86, "386": capabilities.ArchX86, "ppc64": capabilities.ArchPower,
		"ppc64le": capabilities.ArchPower, "arm64": capabilities.ArchARM, "arm": capabilities.ArchARM} {
		got, err := archFromGOARCH(goarch)
		require.NoError(t, err, goarch)
		assert.Equal(t, want, got, goarch)
	}
	for _, goarch := range []string{"riscv64", "s390x", "loong64", "wasm", ""} {
		_, err := archFromGOARCH(goarch)
		assert.Error(t, err, goarch)
	}
}

func TestProbeHostThisMachine(t *testing.T) {
	h, err := ProbeHost()
	if runtime.GOOS != "linux" {
		assert.Error(t, err, "no /proc/cpuinfo off Linux")
		assert.GreaterOrEqual(t, h.Cores, 1)
		return
	}
	require.NoError(t, err)
	t.Logf("host: %+v (arch %v, vendor %v)", h, h.Arch, h.Vendor)
	assert.GreaterOrEqual(t, h.Cores, 1)
	assert.GreaterOrEqual(t, h.NUMANodes, 1)
	want, werr := archFromGOARCH(runtime.GOARCH)
	require.NoError(t, werr)
	assert.Equal(t, want, h.Arch)
	if runtime.GOARCH == "amd64" {
		assert.Equal(t, capabilities.ArchX86, h.Arch)
		assert.Contains(t, []capabilities.CPUVendor{capabilities.VendorIntel, capabilities.VendorAMD, capabilities.VendorZhaoxin}, h.Vendor)
	}
}

func TestProbeHostFixtures(t *testing.T) {
	sys := t.TempDir()
	for _, d := range []string{"node0", "node1", "node3", "power", "nodeX"} {
		require.NoError(t, os.Mkdir(filepath.Join(sys, d), 0o755))
	}
	for _, f := range []string{"possible", "online", "node7"} { // files, not node directories
		require.NoError(t, os.WriteFile(filepath.Join(sys, f), []byte("0-1\n"), 0o644))
	}
	cpuinfo := filepath.Join("testdata", "cpuinfo", "amd_epyc_9654_2s.txt")

	h, err := probeHost(cpuinfo, sys)
	require.NoError(t, err)
	assert.Equal(t, HostProbe{Cores: 8, Arch: capabilities.ArchX86, Vendor: capabilities.VendorAMD, NUMANodes: 3,
		ModelName: "AMD EPYC 9654 96-Core Processor"}, h)

	h, err = probeHost(cpuinfo, filepath.Join(sys, "missing"))
	require.NoError(t, err)
	assert.Equal(t, 1, h.NUMANodes, "no node directory is one node")

	h, err = probeHost(filepath.Join(sys, "no-cpuinfo"), sys)
	assert.ErrorContains(t, err, "probe: host probe")
	assert.Equal(t, runtime.NumCPU(), h.Cores, "fallback cores")
	assert.Equal(t, capabilities.VendorUndefined, h.Vendor)
	assert.Equal(t, 3, h.NUMANodes)

	h, err = probeHost(filepath.Join("testdata", "cpuinfo", "empty.txt"), sys)
	assert.ErrorContains(t, err, "no processor entries")
	assert.Equal(t, runtime.NumCPU(), h.Cores, "fallback cores")
}

// ---- GPU probe ----

// checkRealProbe is the real-machine check: without NVML, an ErrNoNVML error that says why;
// with it, GPUs with a compute capability.
func checkRealProbe(t *testing.T, p GPUProbe, err error) {
	t.Helper()
	if err != nil {
		t.Logf("ProbeGPUs: %v", err)
		require.ErrorIs(t, err, ErrNoNVML)
		assert.Greater(t, len(err.Error()), len(ErrNoNVML.Error())+2, "the error says why: %q", err)
		assert.Empty(t, p.GPUs)
		return
	}
	t.Logf("ProbeGPUs: %+v", p)
	for _, g := range p.GPUs {
		assert.Greater(t, g.ComputeCapability, 0, "GPU %d (%s)", g.Index, g.Name)
		assert.NotEmpty(t, g.Name, "GPU %d", g.Index)
		assert.GreaterOrEqual(t, g.NVLinks, 0)
	}
}

func TestProbeGPUsThisMachine(t *testing.T) {
	var (
		p   GPUProbe
		err error
	)
	require.NotPanics(t, func() { p, err = ProbeGPUs() })
	checkRealProbe(t, p, err)
	// A second probe works the same (NVML's init is reference counted).
	p2, err2 := ProbeGPUs()
	checkRealProbe(t, p2, err2)
	assert.Equal(t, err == nil, err2 == nil)
	assert.Equal(t, len(p.GPUs), len(p2.GPUs))
}

func TestProbeGPUsContextCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := ProbeGPUsContext(ctx)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestOpenNVMLWithoutCgo(t *testing.T) {
	lib, err := openNVML()
	if err != nil {
		// nonvml.go: the reason is the build, not the machine.
		require.ErrorIs(t, err, ErrNoNVML)
		assert.Nil(t, lib)
		if runtime.GOOS == "linux" {
			assert.EqualError(t, err, "probe: no NVML: built without cgo")
		}
		return
	}
	require.NotNil(t, lib, "nvml.go")
}

type fakeLink struct {
	active, toSwitch bool
	err, swErr       error
}

type fakeGPU struct {
	name         string
	major, minor int
	links        []fakeLink
	fabric       fabricInfo
	fabricErr    error
	nameErr      error
	ccErr        error
}

func (g *fakeGPU) Name() (string, error) { return g.name, g.nameErr }
func (g *fakeGPU) ComputeCapability() (int, int, error) {
	return g.major, g.minor, g.ccErr
}
func (g *fakeGPU) NVLinkActive(l int) (bool, error) {
	if l >= len(g.links) {
		return false, errors.New("nvml: Invalid Argument")
	}
	return g.links[l].active, g.links[l].err
}
func (g *fakeGPU) NVLinkToSwitch(l int) (bool, error) { return g.links[l].toSwitch, g.links[l].swErr }
func (g *fakeGPU) Fabric() (fabricInfo, error)        { return g.fabric, g.fabricErr }

type fakeNVML struct {
	initErr, countErr, deviceErr, shutdownErr error
	gpus                                      []*fakeGPU
	inits, shutdowns                          int
	panicInCount                              bool
	block                                     chan struct{} // Init waits on it when set
}

func (f *fakeNVML) Init() error {
	f.inits++
	if f.block != nil {
		<-f.block
	}
	return f.initErr
}
func (f *fakeNVML) Shutdown() error { f.shutdowns++; return f.shutdownErr }
func (f *fakeNVML) DeviceCount() (int, error) {
	if f.panicInCount {
		panic("nvml exploded")
	}
	return len(f.gpus), f.countErr
}
func (f *fakeNVML) Device(i int) (nvmlDevice, error) {
	if f.deviceErr != nil {
		return nil, f.deviceErr
	}
	return f.gpus[i], nil
}

func links(n int, l fakeLink) []fakeLink {
	out := make([]fakeLink, n)
	for i := range out {
		out[i] = l
	}
	return out
}

func TestProbeGPUsFake(t *testing.T) {
	h100 := func() *fakeGPU {
		return &fakeGPU{name: "NVIDIA H100 80GB HBM3", major: 9, links: links(18, fakeLink{active: true, toSwitch: true}),
			fabric: fabricInfo{State: 3, StatusOK: true}}
	}
	pcie := func() *fakeGPU {
		return &fakeGPU{name: "NVIDIA L40S", major: 8, minor: 9, links: links(maxNVLinks, fakeLink{err: errNotSupported}),
			fabricErr: fmt.Errorf("%w: Not Supported", errNotSupported)}
	}
	// Two A100 PCIe with an NVLink bridge: 4 active links to the peer GPU, no switch.
	bridged := func() *fakeGPU {
		l := links(12, fakeLink{})
		for i := 0; i < 4; i++ {
			l[i] = fakeLink{active: true}
		}
		return &fakeGPU{name: "NVIDIA A100 80GB PCIe", major: 8, links: l, fabric: fabricInfo{State: 0}}
	}
	// NVLink to switch detected only through the fabric state.
	fabricOnly := func() *fakeGPU {
		g := h100()
		for i := range g.links {
			g.links[i].swErr = errNotSupported
		}
		g.fabric = fabricInfo{State: 2}
		return g
	}
	tests := []struct {
		name string
		gpus []*fakeGPU
		want GPUProbe
	}{
		{"no GPUs", nil, GPUProbe{}},
		{"DGX H100", []*fakeGPU{h100(), h100()}, GPUProbe{NVSwitch: true, GPUs: []GPUInfo{
			{0, "NVIDIA H100 80GB HBM3", 90, 18, "completed"}, {1, "NVIDIA H100 80GB HBM3", 90, 18, "completed"}}}},
		{"PCIe L40S", []*fakeGPU{pcie()}, GPUProbe{GPUs: []GPUInfo{{0, "NVIDIA L40S", 89, 0, "not supported"}}}},
		{"NVLink bridge", []*fakeGPU{bridged(), bridged()}, GPUProbe{GPUs: []GPUInfo{
			{0, "NVIDIA A100 80GB PCIe", 80, 4, "not supported"}, {1, "NVIDIA A100 80GB PCIe", 80, 4, "not supported"}}}},
		{"fabric only", []*fakeGPU{fabricOnly()}, GPUProbe{NVSwitch: true, GPUs: []GPUInfo{
			{0, "NVIDIA H100 80GB HBM3", 90, 18, "in progress"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lib := &fakeNVML{gpus: tc.gpus}
			p, err := probeWithContext(context.Background(), func() (nvmlLib, error) { return lib, nil })
			require.NoError(t, err)
			assert.Equal(t, tc.want, p)
			assert.Equal(t, 1, lib.inits)
			assert.Equal(t, 1, lib.shutdowns)
		})
	}
}

func TestFabricState(t *testing.T) {
	for _, tc := range []struct {
		f    fabricInfo
		err  error
		want string
	}{
		{fabricInfo{State: 0}, nil, "not supported"},
		{fabricInfo{State: 1}, nil, "not started"},
		{fabricInfo{State: 2}, nil, "in progress"},
		{fabricInfo{State: 3, StatusOK: true}, nil, "completed"},
		{fabricInfo{State: 3}, nil, "failed"},
		{fabricInfo{State: 7}, nil, "state 7"},
		{fabricInfo{}, fmt.Errorf("wrapped: %w", errNotSupported), "not supported"},
		{fabricInfo{State: 3}, errors.New("nvml: Unknown Error"), ""},
	} {
		assert.Equal(t, tc.want, fabricState(tc.f, tc.err), "%+v, %v", tc.f, tc.err)
	}
}

func TestProbeGPUsFakeErrors(t *testing.T) {
	boom := errors.New("nvml: GPU is lost")
	noNVML := fmt.Errorf("%w: nvmlInit failed: Driver Not Loaded", ErrNoNVML)
	gpu := func(mod func(*fakeGPU)) []*fakeGPU {
		g := &fakeGPU{name: "NVIDIA A100-SXM4-80GB", major: 8}
		mod(g)
		return []*fakeGPU{g}
	}
	tests := []struct {
		name          string
		lib           *fakeNVML
		wantIs        error
		wantMsg       string
		wantShutdowns int
	}{
		{"init fails", &fakeNVML{initErr: noNVML}, ErrNoNVML, "Driver Not Loaded", 0},
		{"count fails", &fakeNVML{countErr: boom}, boom, "device count", 1},
		{"device fails", &fakeNVML{deviceErr: boom, gpus: gpu(func(*fakeGPU) {})}, boom, "device 0", 1},
		{"name fails", &fakeNVML{gpus: gpu(func(g *fakeGPU) { g.nameErr = boom })}, boom, "device 0 name", 1},
		{"cc fails", &fakeNVML{gpus: gpu(func(g *fakeGPU) { g.ccErr = boom })}, boom, "compute capability", 1},
		{"shutdown fails", &fakeNVML{shutdownErr: boom, gpus: gpu(func(*fakeGPU) {})}, boom, "shutdown", 1},
		{"panic", &fakeNVML{panicInCount: true}, nil, "panicked: nvml exploded", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p GPUProbe
			var err error
			require.NotPanics(t, func() {
				p, err = probeWithContext(context.Background(), func() (nvmlLib, error) { return tc.lib, nil })
			})
			require.Error(t, err)
			if tc.wantIs != nil {
				assert.ErrorIs(t, err, tc.wantIs)
			}
			assert.ErrorContains(t, err, tc.wantMsg)
			assert.Equal(t, GPUProbe{}, p)
			assert.Equal(t, tc.wantShutdowns, tc.lib.shutdowns, "Shutdown after a successful Init only")
		})
	}

	_, err := probeWithContext(context.Background(), func() (nvmlLib, error) { return nil, noNVML })
	assert.ErrorIs(t, err, ErrNoNVML)
}

func TestProbeGPUsTimeout(t *testing.T) {
	lib := &fakeNVML{block: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := probeWithContext(ctx, func() (nvmlLib, error) { return lib, nil })
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "gpu probe")
	assert.Less(t, time.Since(start), 5*time.Second)

	// The hung probe still holds NVML: the next one waits for it only until its own deadline.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	other := &fakeNVML{}
	_, err = probeWithContext(ctx2, func() (nvmlLib, error) { return other, nil })
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	close(lib.block) // let the abandoned probes finish
	p, err := probeWithContext(context.Background(), func() (nvmlLib, error) { return &fakeNVML{}, nil })
	assert.NoError(t, err, "probing works again once the hung probe returns")
	assert.Equal(t, GPUProbe{}, p)
}
