//go:build cgo && linux

package probe

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The go-nvml adapter behind nvmlLib. This is the only file that imports go-nvml. go-nvml opens
// libnvidia-ml.so.1 with dlopen at Init, so the binary builds and starts without a driver.

const nvmlLibraryName = "libnvidia-ml.so.1" // go-nvml's default

// nvmlLibrary is the one go-nvml library instance: its Init and Shutdown are reference counted, so
// concurrent probes share it.
var nvmlLibrary = sync.OnceValue(func() nvml.Interface { return nvml.New(nvml.WithLibraryPath(nvmlLibraryName)) })

// openNVML returns the go-nvml adapter; it cannot fail before Init.
func openNVML() (nvmlLib, error) { return goNVML{nvmlLibrary()}, nil }

type goNVML struct{ lib nvml.Interface }

func (g goNVML) Init() error {
	switch ret := g.lib.Init(); ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		// go-nvml drops dlopen's message; open the library once more to get it.
		return fmt.Errorf("%w: library not found: %s", ErrNoNVML, dlopenError(nvmlLibraryName))
	default:
		return fmt.Errorf("%w: nvmlInit failed: %s", ErrNoNVML, nvml.ErrorString(ret))
	}
}

// dlopenError returns why dlopen(name) fails (dlerror names the library), or a note that it
// succeeded this time.
func dlopenError(name string) string {
	lib := dl.New(name, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := lib.Open(); err != nil {
		return err.Error()
	}
	_ = lib.Close()
	return name + ": dlopen succeeded on retry"
}

func (g goNVML) Shutdown() error { return nvmlErr(g.lib.Shutdown()) }

func (g goNVML) DeviceCount() (int, error) {
	n, ret := g.lib.DeviceGetCount()
	return n, nvmlErr(ret)
}

func (g goNVML) Device(index int) (nvmlDevice, error) {
	d, ret := g.lib.DeviceGetHandleByIndex(index)
	if err := nvmlErr(ret); err != nil {
		return nil, err
	}
	return goNVMLDevice{d: d, ext: g.lib.Extensions()}, nil
}

type goNVMLDevice struct {
	d   nvml.Device
	ext nvml.ExtendedInterface
}

func (d goNVMLDevice) Name() (string, error) {
	s, ret := d.d.GetName()
	return s, nvmlErr(ret)
}

func (d goNVMLDevice) ComputeCapability() (int, int, error) {
	major, minor, ret := d.d.GetCudaComputeCapability()
	return major, minor, nvmlErr(ret)
}

func (d goNVMLDevice) NVLinkActive(link int) (bool, error) {
	st, ret := d.d.GetNvLinkState(link)
	return st == nvml.FEATURE_ENABLED, nvmlErr(ret)
}

// NVLinkToSwitch and Fabric call entry points that old drivers lack; go-nvml would abort the process
// on a missing symbol, so they look it up first.
func (d goNVMLDevice) NVLinkToSwitch(link int) (bool, error) {
	if err := d.ext.LookupSymbol("nvmlDeviceGetNvLinkRemoteDeviceType"); err != nil {
		return false, fmt.Errorf("%w: %v", errNotSupported, err)
	}
	t, ret := d.d.GetNvLinkRemoteDeviceType(link)
	return t == nvml.NVLINK_DEVICE_TYPE_SWITCH, nvmlErr(ret)
}

func (d goNVMLDevice) Fabric() (fabricInfo, error) {
	// NCCL asks nvmlDeviceGetGpuFabricInfoV for version 2 (R550+); older drivers have only the v1
	// call, which the CUDA 13 header deprecates.
	if d.ext.LookupSymbol("nvmlDeviceGetGpuFabricInfoV") == nil {
		f, ret := d.d.GetGpuFabricInfoV().V2()
		if ret != nvml.ERROR_ARGUMENT_VERSION_MISMATCH {
			if err := nvmlErr(ret); err != nil {
				return fabricInfo{}, err
			}
			return fabricInfo{State: int(f.State), StatusOK: nvml.Return(f.Status) == nvml.SUCCESS}, nil
		}
	}
	if err := d.ext.LookupSymbol("nvmlDeviceGetGpuFabricInfo"); err != nil {
		return fabricInfo{}, fmt.Errorf("%w: %v", errNotSupported, err)
	}
	f, ret := d.d.GetGpuFabricInfoV().V1()
	if err := nvmlErr(ret); err != nil {
		return fabricInfo{}, err
	}
	return fabricInfo{State: int(f.State), StatusOK: nvml.Return(f.Status) == nvml.SUCCESS}, nil
}

// nvmlErr turns an NVML return code into an error; "not supported" and "function not found" wrap
// errNotSupported.
func nvmlErr(ret nvml.Return) error {
	switch ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		return fmt.Errorf("%w: %s", errNotSupported, nvml.ErrorString(ret))
	}
	return fmt.Errorf("nvml: %s", nvml.ErrorString(ret))
}
