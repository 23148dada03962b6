package main

/*
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/recgo/recgo/engine/dynamic"
	"github.com/recgo/recgo/engine/embedding"
	"github.com/recgo/recgo/engine/feature"
	"github.com/recgo/recgo/engine/reader"
	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/cost"
	"github.com/recgo/recgo/planner/highs"
)

// abiConstant is one named integer that Python must agree on with Go: a status code, an enum value
// the C ABI takes, or the length of a fixed-layout array an export reads or writes.
type abiConstant struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
}

// abiConstants lists every constant that crosses the C ABI, each taken from its Go declaration.
// scripts/gen_abi.py writes them into python/recgo/_abi.py (CONSTANTS); Python reads them there
// (recgo._lib.const) and checks the loaded library's manifest against them. A constant Python needs
// is added here, never written as a literal on the Python side.
func abiConstants() []abiConstant {
	var c []abiConstant
	add := func(name string, v int64) { c = append(c, abiConstant{name, v}) }

	// Status codes (internal/errs): recgo.errors maps each to an exception class.
	add("CodeOK", errs.CodeOK)
	add("CodeInvalid", errs.CodeInvalid)
	add("CodeNotFound", errs.CodeNotFound)
	add("CodeSolver", errs.CodeSolver)
	add("CodeIO", errs.CodeIO)
	add("CodeCapacity", errs.CodeCapacity)
	add("CodeInternal", errs.CodeInternal)

	// Optimizer kinds (recgo_ebc_new, recgo_ebc_set_optimizer).
	add("OptNone", int64(embedding.OptNone))
	add("OptSGD", int64(embedding.OptSGD))
	add("OptAdagrad", int64(embedding.OptAdagrad))
	add("OptRowwiseAdagrad", int64(embedding.OptRowwiseAdagrad))
	add("OptAdam", int64(embedding.OptAdam))
	add("OptAdamW", int64(embedding.OptAdamW))

	// The largest shuffle window a pipeline spec may ask for (rows held in memory).
	add("MaxShuffleWindow", reader.MaxShuffleWindow)

	// Pooling codes (recgo_ebc_new featPool).
	add("PoolSum", int64(embedding.PoolSum))
	add("PoolMean", int64(embedding.PoolMean))

	// recgo_ebc_table_memory kinds and recgo_ebc_stage_times length.
	add("TableMemWeights", tableMemWeights)
	add("TableMemState", tableMemState)
	add("TableMemStep", tableMemStep)
	add("EbcStageCount", int64(len(embedding.StageTimes())))

	// Dynamic tables: eviction policies, stats length, snapshot meta layout, sketch shard count.
	add("PolicyLRU", int64(dynamic.LRU))
	add("PolicyLFU", int64(dynamic.LFU))
	add("DynamicStatsLen", dynamicStatsLen)
	add("DynamicMetaDim", metaDim)
	add("DynamicMetaStateWidth", metaStateWidth)
	add("DynamicMetaMaxRows", metaMaxRows)
	add("DynamicMetaSketchWidth", metaSketchWidth)
	add("DynamicMetaStep", metaStep)
	add("DynamicMetaAdmitted", metaAdmitted)
	add("DynamicMetaEvicted", metaEvicted)
	add("DynamicMetaHighWater", metaHighWater)
	add("DynamicMetaFree", metaFree)
	add("DynamicMetaSketch", metaSketch)
	add("DynamicMetaSeed", metaSeed)
	add("DynamicMetaSketchIndexing", metaSketchIndexing)
	add("DynamicMetaLen", metaLen)
	add("DynamicSketchShards", dynamic.SketchShards)
	add("DynamicSketchDepth", dynamic.SketchDepth)
	add("DynamicSketchV1", int64(dynamic.SketchV1))
	add("DynamicSketchV2", int64(dynamic.SketchV2))
	// The forward exports' train argument (contexts.go).
	add("ForwardEval", forwardEval)
	add("ForwardTrain", forwardTrain)
	add("ForwardRecompute", forwardRecompute)

	// Feature engine input descriptors (recgo_feature_run): element kinds and row width in words.
	// The planner's default cluster (RecShard's), so Python's Topology defaults are Go's.
	def := cost.DefaultTopology()
	add("TopologyNodes", int64(def.Nodes))
	add("TopologyGPUsPerNode", int64(def.GPUsPerNode))
	add("TopologyHBMBytes", int64(def.HBMBytes))
	add("TopologyHostBytes", int64(def.HostBytes))
	add("TopologyHBMBandwidth", int64(def.HBMBandwidth))
	add("TopologyUVMBandwidth", int64(def.UVMBandwidth))
	add("TopologyBatchSize", int64(def.BatchSize))

	add("FeatureKindInt64", int64(feature.KindInt64))
	add("FeatureKindFloat32", int64(feature.KindFloat32))
	add("FeatureKindFloat64", int64(feature.KindFloat64))
	add("FeatureKindBytes", int64(feature.KindBytes))
	add("FeatureDescWords", int64(unsafe.Sizeof(inputDesc{})/8))

	// HiGHS model statuses (recgo_highs_solve info[0]).
	for s := highs.StatusNotSet; s <= highs.StatusInterrupt; s++ {
		add("HighsStatus"+highsStatusName(s), int64(s))
	}
	return c
}

// highsStatusName is a status's name in CamelCase ("time limit" → "TimeLimit").
func highsStatusName(s highs.Status) string {
	out := make([]byte, 0, 24)
	up := true
	for _, r := range []byte(s.String()) {
		switch {
		case r == ' ' || r == '-':
			up = true
		case up && r >= 'a' && r <= 'z':
			out, up = append(out, r-'a'+'A'), false
		default:
			out, up = append(out, r), false
		}
	}
	return string(out)
}

// recgo_abi_constants writes the ABI's named constants as a JSON array of {"name", "value"} into buf
// (the JSON-out convention of writeDoc: capacity buflen, length in *needed).
//
//export recgo_abi_constants
func recgo_abi_constants(buf unsafe.Pointer, buflen C.int64_t, needed *C.int64_t, errbuf *C.char, errlen C.size_t) C.int {
	return guard(errbuf, errlen, func() error {
		return writeJSON(abiConstants(), buf, buflen, needed)
	})
}
