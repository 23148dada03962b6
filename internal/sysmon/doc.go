// Package sysmon keeps the Go runtime's monitor thread (sysmon) from preempting the threads that
// run the engine's work.
//
// Why: sysmon sleeps between 20 µs and 10 ms at a time and on each wakeup retakes Ps held by threads
// in system calls and preempts goroutines that ran 10 ms on one scheduling tick. The threads that call
// into Go from C (Python's thread, torch's OpenMP workers running the engine's loops) keep their P
// between calls on a tick that never advances, so sysmon retakes or preempts them about every 10 ms,
// and every retake sends it back to polling each 20 µs for its next 50 wakeups. When the step's
// threads hold every core, each of those wakeups preempts one of them: in perf of the sequence
// benchmark the Python thread was switched out for sysmon about six times per step, and in some 15 %
// of steps its half of the backward ran 0.4–0.7 ms longer than the other half. Under SCHED_BATCH
// the kernel does not preempt a running thread for a batch thread that wakes (it runs at the next
// tick, or at once on an idle core), with its share of CPU time unchanged: sysmon still does its
// work, it just waits for a core instead of taking one.
//
// How: Go does not say which thread is sysmon, so Quiet finds it. While Quiet runs it holds a P,
// so sysmon keeps polling instead of parking; Quiet samples which of the process's threads sit in
// nanosleep, the system call of the runtime's usleep that sysmon loops on (glibc sleeps with
// clock_nanosleep), and takes the one thread found there in most samples, or none when no thread
// stands out. Threads that sysmon itself starts (Ms for the Ps it hands off) inherit its policy;
// after each garbage collection a sweep sets those back to SCHED_OTHER.
package sysmon

import "strings"

// Enabled reports whether the environment value of RECGO_SYSMON_BATCH lets Quiet run: any but "0".
func Enabled(env string) bool { return strings.TrimSpace(env) != "0" }
