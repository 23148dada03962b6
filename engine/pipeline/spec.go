package pipeline

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/engine/reader"
	"github.com/recgo/recgo/engine/shard"
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner"
)

// Spec is the JSON description of a pipeline (what Python's recgo.DataPipeline sends): the source,
// an optional position to resume from, and the Config fields.
type Spec struct {
	Source   reader.Spec      `json:"source"`
	Position *reader.Position `json:"position,omitempty"`
	Config
}

// Open parses a JSON pipeline spec, opens its source (sought to Position when given) and starts
// the pipeline over eng, with remap (may be nil) renumbering the tables it names and pt (may be
// nil) partitioning a sharded collection's tables by owner.
func Open(ctx context.Context, data []byte, eng *feature.Engine, remap *planner.Remap, pt *shard.Partitioner) (*Pipeline, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return nil, errs.Invalidf("pipeline spec: %v", err)
	}
	src, err := reader.Open(&s.Source)
	if err != nil {
		return nil, err
	}
	if s.Position != nil {
		if s.Position.Shuffle != 0 && s.Source.Shuffle == 0 {
			_ = src.Close()
			return nil, errs.Invalidf("pipeline spec: the position was taken from a source shuffled in windows of %d "+
				"rows; resume it with the same shuffle and seed", s.Position.Shuffle)
		}
		if err := src.Seek(*s.Position); err != nil {
			_ = src.Close()
			return nil, err
		}
	}
	s.Config.Remap, s.Config.Partitioner = remap, pt
	p, err := New(ctx, src, eng, s.Config)
	if err != nil {
		_ = src.Close()
		return nil, err
	}
	return p, nil
}
