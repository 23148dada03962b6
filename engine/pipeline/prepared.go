package pipeline

import (
	"sync"

	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/engine/reader"
	"github.com/recgo/recgo/engine/shard"
	"github.com/recgo/recgo/internal/offheap"
)

// Prepared is one formatted batch: a KeyedJaggedTensor (Values feature-major in Keys order, Lengths
// with entry f·Size+b), the labels, the dense matrix (Size × DenseWidth, row-major) and each table's
// dedup, all in one off-heap buffer so Python wraps them without a copy. Close hands the buffer
// back to the pipeline's pool; nothing may use the slices afterwards.
type Prepared struct {
	Step       int64
	Size       int
	Keys       []string
	Values     []int64
	Lengths    []int64
	Labels     []float32
	Dense      []float32
	DenseWidth int
	Dedup      []embedding.TableDedup
	// Partition (nil without a Config.Partitioner) is the leg-0 partition by owner of the sharded
	// collection's tables, one entry per Dedup entry (empty for tables the collection lacks).
	Partition *shard.Partition
	// Position is the source's position after this batch: resuming from it yields step Step+1.
	Position reader.Position

	once sync.Once
	buf  *offheap.Buffer
	pool *bufPool
}

// Close returns the batch's memory to the pool (or frees it). A second Close is a no-op.
func (b *Prepared) Close() error {
	b.once.Do(func() {
		b.pool.put(b.buf)
		b.buf, b.Values, b.Lengths, b.Labels, b.Dense, b.Dedup, b.Partition = nil, nil, nil, nil, nil, nil, nil
	})
	return nil
}

// bufPool recycles off-heap buffers up to a bound; buffers beyond it are freed when returned.
type bufPool struct {
	mu     sync.Mutex
	free   []*offheap.Buffer
	max    int
	closed bool
}

// get returns a buffer of at least n bytes (contents arbitrary).
func (p *bufPool) get(n int) (*offheap.Buffer, error) {
	n = max(n, 64)
	p.mu.Lock()
	best := -1
	for i, b := range p.free {
		if b.Len() >= n && (best < 0 || b.Len() < p.free[best].Len()) {
			best = i
		}
	}
	if best >= 0 {
		b := p.free[best]
		p.free = append(p.free[:best], p.free[best+1:]...)
		p.mu.Unlock()
		return b, nil
	}
	var evict *offheap.Buffer
	if len(p.free) > 0 && len(p.free) >= p.max {
		evict, p.free = p.free[0], p.free[1:] // too small for this batch: make room for a larger one
	}
	p.mu.Unlock()
	if evict != nil {
		_ = evict.Free()
	}
	size := 1
	for size < n+n/4 {
		size <<= 1
	}
	return offheap.Alloc(size)
}

func (p *bufPool) put(b *offheap.Buffer) {
	if b == nil {
		return
	}
	p.mu.Lock()
	if !p.closed && len(p.free) < p.max {
		p.free = append(p.free, b)
		b = nil
	}
	p.mu.Unlock()
	if b != nil {
		_ = b.Free()
	}
}

// close frees the pooled buffers; buffers returned later are freed at once.
func (p *bufPool) close() {
	p.mu.Lock()
	free := p.free
	p.free, p.closed = nil, true
	p.mu.Unlock()
	for _, b := range free {
		_ = b.Free()
	}
}

// pooled reports how many buffers the pool holds (tests).
func (p *bufPool) pooled() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}
