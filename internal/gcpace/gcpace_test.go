package gcpace

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		name     string
		live, h  int64
		expected int
	}{
		{"small heap keeps the default", 8 << 20, 32 << 20, 100},
		{"heap equal to headroom", 32 << 20, 32 << 20, 100},
		{"four times the headroom", 128 << 20, 32 << 20, 25},
		{"huge heap stops at the floor", 64 << 30, 32 << 20, MinPercent},
		{"no live heap", 0, 32 << 20, 100},
		{"no headroom", 1 << 30, 0, 100},
	} {
		t.Run(c.name, func(t *testing.T) { assert.Equal(t, c.expected, Percent(c.live, c.h)) })
	}
}

func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		name, gogc, mib string
		h               int64
		on              bool
	}{
		{"defaults", "", "", DefaultHeadroom, true},
		{"GOGC set by the user", "200", "", 0, false},
		{"GOGC off by the user", "off", "64", 0, false},
		{"headroom in MiB", "", "64", 64 << 20, true},
		{"zero turns pacing off", "", "0", 0, false},
		{"garbage means the default", "", "lots", DefaultHeadroom, true},
		{"negative means the default", "", "-5", DefaultHeadroom, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, on := FromEnv(c.gogc, c.mib)
			assert.Equal(t, c.on, on)
			assert.Equal(t, c.h, h)
		})
	}
}

// TestPacerFollowsLiveHeap holds a live heap of eight headrooms and checks that the pacer lowers
// GOGC after a collection, then raises it back once the heap is freed.
func TestPacerFollowsLiveHeap(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("RECGO_GC_HEADROOM", "4")
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	require.Equal(t, int64(4<<20), Start())
	waitFor := func(want func(int) bool) int {
		deadline := time.Now().Add(10 * time.Second)
		for {
			runtime.GC()
			if p := Current(); want(p) || time.Now().After(deadline) {
				return p
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	live := make([]byte, 32<<20)
	for i := range live {
		live[i] = 1
	}
	p := waitFor(func(p int) bool { return p <= 15 })
	assert.LessOrEqual(t, p, 15, "a 32 MiB live heap over a 4 MiB headroom")
	assert.GreaterOrEqual(t, p, MinPercent)
	assert.Equal(t, p, debug.SetGCPercent(p), "the runtime runs with the pacer's GOGC")
	runtime.KeepAlive(live)
	live = nil
	assert.Equal(t, 100, waitFor(func(p int) bool { return p == 100 }), "a freed heap gets the default back")
}
