package cuda

import (
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeviceModule runs only where a CUDA driver is (bench/gpu/run.sh runs it on the lent GPU
// machine, with COLLPLAN_REQUIRE_CUDA=1 so that a missing driver fails): it compiles the kernels
// with NVRTC for each device's architecture (sm_90a on an H200; through the cache) and has the
// driver load the cubin and resolve every entry point KernelNames lists for the device, and
// reports whether the device can multicast (NVLS).
func TestDeviceModule(t *testing.T) {
	drv, err := OpenDriver()
	if errors.Is(err, ErrNoDriver) {
		if os.Getenv("COLLPLAN_REQUIRE_CUDA") == "1" {
			t.Fatalf("COLLPLAN_REQUIRE_CUDA=1, but: %v", err)
		}
		t.Skipf("%v: this test needs a GPU (bench/gpu/run.sh runs it there)", err)
	}
	require.NoError(t, err)
	devs, err := drv.Devices()
	require.NoError(t, err)
	require.NotEmpty(t, devs, "the driver sees no device")
	n := openNVRTC(t)
	dir, err := DefaultCacheDir()
	require.NoError(t, err)
	files, err := SourceFiles()
	require.NoError(t, err)
	for _, dev := range devs {
		out, hit, err := n.CompileCached(Cache{Dir: dir}, files, MainSource, dev.Arch())
		require.NoError(t, err, "NVRTC for %s", dev.Arch())
		t.Logf("device %d: %s, %s, %d SMs, multicast %v, driver %d; NVRTC %s (cache hit %v)",
			dev.Ordinal, dev.Name, dev.Arch(), dev.Multiprocessors, dev.MulticastCapable, drv.Version, n.Version(), hit)
		assert.NoError(t, drv.CheckModule(dev.Ordinal, out.CUBIN, KernelNames(dev.Major)), "device %d", dev.Ordinal)
	}
}
