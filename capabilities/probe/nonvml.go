//go:build !cgo || !linux

package probe

import (
	"fmt"
	"runtime"
)

// openNVML stands in for the go-nvml adapter where it cannot be built: go-nvml needs cgo and loads
// libnvidia-ml.so.1, which exists only on Linux.
func openNVML() (nvmlLib, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("%w: not supported on %s", ErrNoNVML, runtime.GOOS)
	}
	return nil, fmt.Errorf("%w: built without cgo", ErrNoNVML)
}
