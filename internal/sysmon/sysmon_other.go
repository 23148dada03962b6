//go:build !linux

package sysmon

// Quiet does nothing off Linux (SCHED_BATCH and /proc are Linux's) and returns 0.
func Quiet() int { return 0 }

// Thread returns 0 off Linux.
func Thread() int { return 0 }
