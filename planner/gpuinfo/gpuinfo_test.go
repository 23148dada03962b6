package gpuinfo

import (
	"testing"

	"github.com/recgo/recgo/internal/errs"
	"github.com/stretchr/testify/assert"
)

func TestDetectWithoutDriverIsNamedError(t *testing.T) {
	_, err := detect("libnvidia-ml-does-not-exist.so.1")
	assert.ErrorIs(t, err, errs.ErrNotFound)
	assert.ErrorContains(t, err, "cannot load")
	_, err = detect("libc.so.6") // loads, but has no NVML entry points
	assert.ErrorContains(t, err, "lacks an NVML entry point")
}

func TestDetectLocal(t *testing.T) {
	gpus, err := Detect()
	if err != nil {
		assert.ErrorIs(t, err, errs.ErrNotFound) // no driver here: graceful
		return
	}
	for _, g := range gpus {
		assert.NotEmpty(t, g.Name)
		assert.Positive(t, g.MemoryBytes)
	}
}
