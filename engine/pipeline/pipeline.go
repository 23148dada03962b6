package pipeline

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/engine/reader"
	"github.com/recgo/recgo/engine/shard"
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner"
)

// Stage names a pipeline stage.
type Stage int

// The stages, in order.
const (
	StageRead Stage = iota
	StageTransform
	StageFormat
)

// String is the stage's name: read, transform or format.
func (s Stage) String() string {
	return [...]string{"read", "transform", "format"}[s]
}

// StageError is a failure of one stage for one step.
type StageError struct {
	Step  int64
	Stage Stage
	Err   error
}

// Error names the step and stage, then the cause.
func (e *StageError) Error() string {
	return fmt.Sprintf("input pipeline step %d, %s stage: %v", e.Step, e.Stage, e.Err)
}

// Unwrap is the cause, for errors.Is and errors.As (an errs code among them).
func (e *StageError) Unwrap() error { return e.Err }

// Table groups output features that look up one embedding table: the FORMAT stage deduplicates
// their IDs together (features in this order) and, when the plan's remap has a table of this
// Name, renumbers them through it.
type Table struct {
	Name string   `json:"name"`
	Keys []string `json:"keys"`
}

// Config configures a [Pipeline].
type Config struct {
	// BatchSize is the number of samples per batch.
	BatchSize int `json:"batch_size"`
	// Depth is how many future batches are prepared while the consumer works (0: serial).
	Depth int `json:"depth"`
	// Workers is the pipeline's thread budget (default 1): the number of goroutines running
	// TRANSFORM and FORMAT, and the most stage work (READ included) that runs at once, so the
	// pipeline never takes more than Workers cores from the training step. At Depth 0 it is the
	// parallelism of the serial schedule's TRANSFORM.
	Workers int `json:"workers"`
	// DropLast drops a final batch smaller than BatchSize.
	DropLast bool `json:"drop_last"`
	// Tables are the dedup groups (nil: no dedup).
	Tables []Table `json:"tables"`
	// Remap renumbers the IDs of the tables it names (nil: none).
	Remap *planner.Remap `json:"-"`
	// Partitioner (nil: none) is a sharded collection's: FORMAT also partitions each of its tables'
	// distinct IDs by owner ([Prepared.Partition]), so the collection's step skips that too. Every
	// table of the collection must be one of Tables, with the same features in the same order.
	Partitioner *shard.Partitioner `json:"-"`
}

// maxDepth bounds Depth and Workers.
const maxDepth = 64

// Stats are the pipeline's counters: nanoseconds spent in each stage (summed over goroutines),
// nanoseconds the consumer waited in Next for a batch, and batches and samples handed out.
type Stats struct {
	ReadNs      int64 `json:"read_ns"`
	TransformNs int64 `json:"transform_ns"`
	FormatNs    int64 `json:"format_ns"`
	WaitNs      int64 `json:"wait_ns"`
	Batches     int64 `json:"batches"`
	Samples     int64 `json:"samples"`
	Skipped     int64 `json:"skipped"`
	// FirstSkip is the error of the first row the source dropped under skip_bad ("" for none).
	FirstSkip string `json:"first_skip,omitempty"`
}

type counters struct{ read, transform, format, wait, batches, samples atomic.Int64 }

// job is one step on its way through the stages.
type job struct {
	step int64
	raw  *reader.Batch
	pos  reader.Position
	eof  bool
	done chan struct{}
	out  *Prepared
	err  error
}

// Pipeline prepares batches from a source ahead of the consumer (see the package doc).
type Pipeline struct {
	cfg      Config
	src      reader.Source
	eng      *feature.Engine
	keys     []string
	inputMap []int   // engine input i -> source field
	rawMax   int64   // the bound on a raw batch's sparse fields (rawBound)
	tables   [][]int // per Table: its key indices
	remapIdx []int   // per Table: index in cfg.Remap, or -1
	partIdx  []int   // per Table: its table index in cfg.Partitioner, or -1

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ahead  chan struct{}
	cpu    chan struct{} // Workers tokens: stage work holds one (the thread budget)
	order  chan *job
	work   chan *job
	raws   chan *reader.Batch
	pool   *bufPool
	stats  counters

	step    int64           // the next step Next hands out
	pos     reader.Position // source position after the last batch handed out
	prev    reader.Position // source position before it (what Unnext goes back to)
	back    *Prepared       // a batch given back with Unnext, handed out again first
	backAt  reader.Position // the position after the batch given back
	final   error           // io.EOF or the error that ended the stream
	stopped bool            // the goroutines ended, the pooled buffers freed and the source closed (see stop)
	srcErr  error           // what closing the source returned (Close returns it)
	closed  bool
	serial  reader.Batch
	// firstSkip is the source's first row dropped under skip_bad, as text (see noteSkip)
	firstSkip atomic.Pointer[string]
}

// New builds a pipeline over src (which it owns and closes) and eng. The engine's inputs must be
// fields of the source with matching types. With Depth > 0 its goroutines start at once.
func New(ctx context.Context, src reader.Source, eng *feature.Engine, cfg Config) (*Pipeline, error) {
	if src == nil || eng == nil {
		return nil, errs.Invalidf("pipeline: a source and a feature engine are required")
	}
	if cfg.BatchSize <= 0 || cfg.BatchSize > 1<<24 {
		return nil, errs.Invalidf("pipeline: batch size %d outside [1, %d]", cfg.BatchSize, 1<<24)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.Depth < 0 || cfg.Depth > maxDepth {
		return nil, errs.Invalidf("pipeline: depth %d outside [0, %d]", cfg.Depth, maxDepth)
	}
	if cfg.Workers < 0 || cfg.Workers > maxDepth { // Python's threads argument
		return nil, errs.Invalidf("pipeline: threads %d outside [1, %d] (the thread budget)", cfg.Workers, maxDepth)
	}
	p := &Pipeline{cfg: cfg, src: src, eng: eng, keys: eng.OutputKeys(), pos: src.Position(), rawMax: rawBound(eng)}
	schema := src.Schema()
	for _, in := range eng.Inputs() {
		i := schema.FieldIndex(in.Name)
		if i < 0 {
			names := make([]string, len(schema.Fields))
			for j, f := range schema.Fields {
				names[j] = f.Name
			}
			return nil, errs.Invalidf("pipeline: feature input %q is not a field of the source (fields: %v)", in.Name, names)
		}
		if !kindFits(in.DType, schema.Fields[i].Kind) {
			return nil, errs.Invalidf("pipeline: feature input %q is declared %s but the source reads %s", in.Name, in.DType, schema.Fields[i].Kind)
		}
		p.inputMap = append(p.inputMap, i)
	}
	seen := map[string]string{}
	for _, t := range cfg.Tables {
		var idx []int
		for _, k := range t.Keys {
			ki := slices.Index(p.keys, k)
			if ki < 0 {
				return nil, errs.Invalidf("pipeline: table %q: %q is not an output feature (outputs: %v)", t.Name, k, p.keys)
			}
			if other, dup := seen[k]; dup {
				return nil, errs.Invalidf("pipeline: feature %q is in tables %q and %q", k, other, t.Name)
			}
			seen[k] = t.Name
			idx = append(idx, ki)
		}
		p.tables = append(p.tables, idx)
		ri := -1
		if cfg.Remap != nil {
			if j, err := cfg.Remap.Lookup(t.Name); err == nil {
				ri = j
			}
		}
		p.remapIdx = append(p.remapIdx, ri)
	}
	idx, err := partitionTables(cfg.Tables, cfg.Partitioner)
	if err != nil {
		return nil, err
	}
	p.partIdx = idx
	if ctx == nil {
		ctx = context.Background()
	}
	p.ctx, p.cancel = context.WithCancel(ctx)
	p.pool = &bufPool{max: cfg.Depth + cfg.Workers + 2}
	if cfg.Depth > 0 {
		p.ahead = make(chan struct{}, cfg.Depth)
		p.cpu = make(chan struct{}, cfg.Workers)
		p.order = make(chan *job, cfg.Depth)
		p.work = make(chan *job, cfg.Depth)
		p.raws = make(chan *reader.Batch, cfg.Depth+cfg.Workers+1)
		p.wg.Add(1 + cfg.Workers)
		running.Add(int64(1 + cfg.Workers)) // counted as they are started, not when first scheduled
		go p.readLoop()
		for range cfg.Workers {
			go p.workLoop()
		}
	}
	return p, nil
}

// rawBound is the bound on each sparse field of the raw batches a pipeline over eng reads
// ([reader.Batch.MaxValues]): a bound on the reader's memory, the larger of the reader's default
// and eng's max_values. Not max_values alone (until session 43): it bounds the buffers the engine
// makes, and a field that a transform shrinks first (truncate, filter) may hold more raw values than
// the engine's outputs of it, as may a field no feature reads, so the reader refused batches the
// engine takes. Never less than max_values: a field a feature copies or maps value by value needs
// as many values in the engine's buffers, which take up to max_values, and the engine refuses more
// itself, naming the feature.
func rawBound(eng *feature.Engine) int64 {
	return max(eng.MaxValues(), reader.DefaultMaxValues)
}

func kindFits(d feature.DType, k feature.Kind) bool {
	switch d {
	case feature.Int64:
		return k == feature.KindInt64
	case feature.Float:
		return k == feature.KindFloat32 || k == feature.KindFloat64
	case feature.Bytes:
		return k == feature.KindBytes
	}
	return false
}

// Keys are the output features in KeyedJaggedTensor key order.
func (p *Pipeline) Keys() []string { return slices.Clone(p.keys) }

// DenseWidth is the number of dense columns per sample.
func (p *Pipeline) DenseWidth() int { return len(p.src.Schema().Dense) }

// acquire takes a thread-budget token for a stage's work (false: the pipeline is closing); release
// gives it back. The serial schedule (Depth 0) runs in the consumer's call and takes none.
func (p *Pipeline) acquire() bool {
	if p.cpu == nil {
		return true
	}
	select {
	case p.cpu <- struct{}{}:
		return true
	case <-p.ctx.Done():
		return false
	}
}

func (p *Pipeline) release() {
	if p.cpu != nil {
		<-p.cpu
	}
}

// read runs the READ stage for one step into raw; eof reports the end of the stream.
//
// read and prepare run each stage under [errs.Run]: in a worker goroutine a panic (a bug) would end
// the process, and in any schedule it would skip the stage's bookkeeping; it becomes the step's
// error instead, naming the stage.
func (p *Pipeline) read(raw *reader.Batch) (eof bool, err error) {
	if !p.acquire() {
		return false, context.Cause(p.ctx)
	}
	defer p.release()
	t0 := time.Now()
	raw.MaxValues = p.rawMax
	var n int
	err = errs.Run(func() (err error) { n, err = p.src.Read(raw, p.cfg.BatchSize); return err })
	p.stats.read.Add(int64(time.Since(t0)))
	p.noteSkip()
	if err == io.EOF || (err == nil && p.cfg.DropLast && n < p.cfg.BatchSize) {
		return true, nil
	}
	return false, err
}

// prepare runs TRANSFORM and FORMAT for one step: on one thread in a worker goroutine (the budget
// is spent by running Workers of them), on Workers threads in the serial schedule.
func (p *Pipeline) prepare(step int64, raw *reader.Batch, pos reader.Position) (*Prepared, error) {
	if !p.acquire() {
		return nil, &StageError{Step: step, Stage: StageTransform, Err: context.Cause(p.ctx)}
	}
	defer p.release()
	workers := 1
	if p.cpu == nil {
		workers = p.cfg.Workers
	}
	t0 := time.Now()
	b := feature.Batch{Size: raw.Size, Inputs: make([]feature.Input, len(p.inputMap))}
	for i, f := range p.inputMap {
		b.Inputs[i] = raw.Inputs[f]
	}
	runtime.Gosched() // between stages, let a trainer thread waiting for a P in (see reader's yieldEvery)
	var res *feature.Result
	err := errs.Run(func() (err error) { res, err = p.eng.ApplyN(b, workers); return err })
	p.stats.transform.Add(int64(time.Since(t0)))
	runtime.Gosched()
	if err != nil {
		return nil, &StageError{Step: step, Stage: StageTransform, Err: err}
	}
	t0 = time.Now()
	var out *Prepared
	err = errs.Run(func() (err error) { out, err = p.format(step, raw, res, pos); return err })
	p.stats.format.Add(int64(time.Since(t0)))
	if err != nil {
		return nil, &StageError{Step: step, Stage: StageFormat, Err: err}
	}
	return out, nil
}

func (p *Pipeline) readLoop() {
	defer p.wg.Done()
	defer running.Add(-1)
	for step := int64(0); ; step++ {
		select {
		case p.ahead <- struct{}{}:
		case <-p.ctx.Done():
			return
		}
		j := &job{step: step, done: make(chan struct{})}
		var raw *reader.Batch
		select {
		case raw = <-p.raws:
		default:
			raw = &reader.Batch{}
		}
		eof, err := p.read(raw)
		if p.ctx.Err() != nil { // closing: the read may have been cut short, and nobody waits for it
			return
		}
		j.pos = p.src.Position()
		last := eof || err != nil
		if last {
			j.eof = eof
			if err != nil {
				j.err = &StageError{Step: step, Stage: StageRead, Err: err}
			}
			close(j.done)
		} else {
			j.raw = raw
		}
		p.order <- j // never blocks: at most Depth jobs are outstanding (the ahead semaphore)
		if last {
			return
		}
		p.work <- j
	}
}

func (p *Pipeline) workLoop() {
	defer p.wg.Done()
	defer running.Add(-1)
	for {
		select {
		case j := <-p.work:
			j.out, j.err = p.prepare(j.step, j.raw, j.pos)
			select {
			case p.raws <- j.raw:
			default:
			}
			j.raw = nil
			close(j.done)
		case <-p.ctx.Done():
			return
		}
	}
}

// Next returns the next prepared batch, io.EOF after the last one, or the error of the first step
// that failed (and then that error again). The caller closes each batch when done with it.
func (p *Pipeline) Next() (*Prepared, error) {
	if p.closed {
		return nil, errs.Invalidf("pipeline: closed")
	}
	if p.back != nil {
		out := p.back
		p.back = nil
		p.hand(out, p.backAt)
		return out, nil
	}
	if p.final != nil {
		return nil, p.final
	}
	var (
		out *Prepared
		err error
		pos reader.Position
		eof bool
	)
	if p.cfg.Depth == 0 {
		eof, err = p.read(&p.serial)
		pos = p.src.Position()
		if err != nil {
			err = &StageError{Step: p.step, Stage: StageRead, Err: err}
		} else if !eof {
			out, err = p.prepare(p.step, &p.serial, pos)
		}
	} else {
		t0 := time.Now()
		var j *job
		select {
		case j = <-p.order:
		case <-p.ctx.Done():
			return nil, p.cancelled()
		}
		select {
		case <-j.done:
		case <-p.ctx.Done():
			return nil, p.cancelled()
		}
		p.stats.wait.Add(int64(time.Since(t0)))
		<-p.ahead
		out, err, pos, eof = j.out, j.err, j.pos, j.eof
	}
	if err != nil || eof {
		p.final = err
		if eof {
			p.final = io.EOF
			p.pos = pos
		}
		p.stop()
		return nil, p.final
	}
	p.hand(out, pos)
	return out, nil
}

// hand counts out as handed out, the source then at pos.
func (p *Pipeline) hand(out *Prepared, pos reader.Position) {
	p.step++
	p.prev, p.pos = p.pos, pos
	p.stats.batches.Add(1)
	p.stats.samples.Add(int64(out.Size))
}

// Unnext gives back b, the batch the last Next returned, which the consumer could not take (an
// interrupt arrived as Next returned): the position and step go back to before it, and the next
// Next hands it out again. Only the last batch, and only once.
func (p *Pipeline) Unnext(b *Prepared) error {
	if p.closed {
		return errs.Invalidf("pipeline: closed")
	}
	if b == nil || p.back != nil || p.step == 0 {
		return errs.Invalidf("pipeline: only the batch the last Next returned can be given back, once")
	}
	p.back, p.backAt = b, p.pos
	p.step--
	p.pos = p.prev
	p.stats.batches.Add(-1)
	p.stats.samples.Add(-int64(b.Size))
	return nil
}

func (p *Pipeline) cancelled() error {
	p.final = errs.Invalidf("pipeline: cancelled (%v)", context.Cause(p.ctx))
	return p.final
}

// Position is the source position after the last batch Next returned: a source sought to it
// continues with the next step.
func (p *Pipeline) Position() reader.Position { return p.pos }

// Step is the number of batches handed out.
func (p *Pipeline) Step() int64 { return p.step }

// Stats returns the counters so far.
func (p *Pipeline) Stats() Stats {
	return Stats{ReadNs: p.stats.read.Load(), TransformNs: p.stats.transform.Load(), FormatNs: p.stats.format.Load(),
		WaitNs: p.stats.wait.Load(), Batches: p.stats.batches.Load(), Samples: p.stats.samples.Load(), Skipped: p.pos.Skipped,
		FirstSkip: deref(p.firstSkip.Load())}
}

// noteSkip keeps the source's first row dropped under skip_bad, once it has one (the READ stage
// calls it after each read, so that Stats never touches the source another goroutine reads).
func (p *Pipeline) noteSkip() {
	if p.firstSkip.Load() != nil {
		return
	}
	if r, ok := p.src.(reader.SkipReporter); ok {
		if err := r.FirstSkipped(); err != nil {
			msg := err.Error()
			p.firstSkip.Store(&msg)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Close stops the goroutines, waits for them, frees the batches prepared but not handed out and
// closes the source. Batches the consumer still holds stay valid until their own Close.
func (p *Pipeline) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	p.stop()
	if p.back != nil {
		_ = p.back.Close()
		p.back = nil
	}
	return p.srcErr
}

// stop ends the goroutines, waits for them, frees the batches prepared but not handed out and the
// pooled buffers, and closes the source: at Close, and as soon as the stream ends or fails (a
// pipeline read to its end kept its goroutines and about 0.9 MB until Close, and one stopped by a bad
// line its open file, which a caller keeping finished pipelines piled up). The position, step and
// counters stay readable.
func (p *Pipeline) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	p.cancel()
	p.wg.Wait()
	if p.order != nil {
		for {
			select {
			case j := <-p.order:
				if j.out != nil {
					_ = j.out.Close()
				}
				continue
			default:
			}
			break
		}
	}
	p.pool.close()
	p.srcErr = p.src.Close() // no goroutine reads it now
}

// Running is how many pipeline goroutines run now, over all pipelines of the process (tests and
// the C ABI's leak check use it: it returns to its earlier value once a pipeline is closed).
func Running() int64 { return running.Load() }

var running atomic.Int64
