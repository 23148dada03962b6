package profile_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/recgo/recgo/planner"
	"github.com/recgo/recgo/planner/profile"
)

// The profiler's limit is the planner's default memory limit (a copy: the planner imports this package).
func TestMemoryLimitIsThePlanners(t *testing.T) {
	assert.Equal(t, planner.DefaultMemoryLimit, profile.MemoryLimit)
}
