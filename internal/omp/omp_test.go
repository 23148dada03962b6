package omp

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenFailsForLibrariesNotLoaded(t *testing.T) {
	err := Open("libdefinitely-not-loaded-recgo.so")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not loaded")
	assert.False(t, Enabled())
}

func TestTeamWithoutOpenMPRunsEveryWorker(t *testing.T) {
	Disable()
	var calls atomic.Int32
	done := make(chan struct{}, 4)
	Team(4, func() {
		calls.Add(1)
		done <- struct{}{}
	})
	for range 4 {
		<-done
	}
	assert.EqualValues(t, 4, calls.Load())
}
