package pipeline

import (
	"context"
	"testing"

	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/engine/reader"
	"github.com/stretchr/testify/assert"
)

func TestConfigErrors(t *testing.T) {
	eng := synthEngine(t)
	syn, _ := reader.NewSynthetic(synthCfg(10), reader.Options{})
	_, err := New(context.Background(), syn, eng, Config{BatchSize: 0})
	assert.ErrorContains(t, err, "batch size 0")
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{BatchSize: 4, Depth: -1}, "pipeline: depth -1 outside [0, 64]"},
		{Config{BatchSize: 4, Depth: 65}, "pipeline: depth 65 outside [0, 64]"},
		{Config{BatchSize: 4, Workers: -1}, "pipeline: threads -1 outside [1, 64]"},
		{Config{BatchSize: 4, Workers: 65}, "pipeline: threads 65 outside [1, 64]"},
	} {
		_, err = New(context.Background(), syn, eng, c.cfg)
		assert.ErrorContains(t, err, c.want)
	}
	_, err = New(context.Background(), syn, eng, Config{BatchSize: 4, Tables: []Table{{Name: "x", Keys: []string{"nope"}}}})
	assert.ErrorContains(t, err, "\"nope\" is not an output feature")
	_, err = New(context.Background(), syn, eng, Config{BatchSize: 4, Tables: []Table{{Name: "x", Keys: []string{"u"}}, {Name: "y", Keys: []string{"u"}}}})
	assert.ErrorContains(t, err, "is in tables")
	spec, _ := feature.ParseSpec([]byte(`{"features": [{"name": "zz", "ops": [{"op": "mod", "n": 3}]}]}`))
	other, _ := feature.Compile(spec)
	_, err = New(context.Background(), syn, other, Config{BatchSize: 4})
	assert.ErrorContains(t, err, "feature input \"zz\" is not a field of the source")
}
