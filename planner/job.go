package planner

import (
	"context"
	"time"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/profile"
)

// Job is a [MakeContext] call running in the background, so a caller that must stay responsive
// (Python, which handles SIGINT only between calls into the library) can wait for it in short
// slices and interrupt it. Wait and Cancel may be called from any goroutine, concurrently.
type Job struct {
	cancel context.CancelFunc
	done   chan struct{}
	plan   *Plan
	err    error
}

// Start begins planning prof on topo with opts and returns at once.
func Start(prof *profile.Profile, topo cost.Topology, opts Options) *Job {
	ctx, cancel := context.WithCancel(context.Background())
	j := &Job{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(j.done)
		// errs.Run: a panic in this goroutine would end the process; it becomes the job's error.
		j.err = errs.Run(func() (err error) { j.plan, err = MakeContext(ctx, prof, topo, opts); return err })
	}()
	return j
}

// Wait waits up to timeout for the plan: done is false when the job is still running.
func (j *Job) Wait(timeout time.Duration) (p *Plan, done bool, err error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-j.done:
		return j.plan, true, j.err
	case <-t.C:
		return nil, false, nil
	}
}

// Cancel interrupts the job: the MILP stops within a quarter second (highs.InterruptGrace), even
// while HiGHS presolves, and the job ends with the incumbent (status "interrupted"); heuristics
// stop their improvement phases.
func (j *Job) Cancel() { j.cancel() }

// Close cancels the job (a job whose handle is freed stops working).
func (j *Job) Close() error {
	j.cancel()
	return nil
}
