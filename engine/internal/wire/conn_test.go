package wire

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// TestEndpointLines: an endpoint is a whole number of 64-byte cache lines, so endpoints written by
// goroutines on different cores never share a line (see the padding in Endpoint).
func TestEndpointLines(t *testing.T) {
	assert.Zero(t, unsafe.Sizeof(Endpoint{})%64, "endpoint is %d bytes", unsafe.Sizeof(Endpoint{}))
}
