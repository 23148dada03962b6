package planner

import (
	"encoding/json"

	"github.com/recgo/recgo/internal/errs"
	"github.com/recgo/recgo/planner/cost"
)

// Config is the JSON form of a planning request (what Python and the CLI send).
type Config struct {
	Topology  cost.Topology `json:"topology"`
	Strategy  string        `json:"strategy"`
	CostModel string        `json:"cost_model"`
	Tables    []string      `json:"tables"`
	TimeLimit float64       `json:"time_limit"`
	MipRelGap float64       `json:"mip_rel_gap"`
	Threads   int           `json:"threads"`
	Symmetry  *bool         `json:"symmetry"`
}

// ParseConfig reads a Config and turns it into the topology and options for [Make].
func ParseConfig(data []byte) (cost.Topology, Options, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return cost.Topology{}, Options{}, errs.Invalidf("planner config: %v", err)
	}
	w, err := cost.ParseWeights(c.CostModel)
	if err != nil {
		return cost.Topology{}, Options{}, err
	}
	if c.TimeLimit < 0 || c.MipRelGap < 0 || c.Threads < 0 {
		return cost.Topology{}, Options{}, errs.Invalidf("planner config: negative time_limit, mip_rel_gap or threads")
	}
	sym := c.Symmetry == nil || *c.Symmetry
	return c.Topology, Options{Strategy: c.Strategy, Weights: w, Tables: c.Tables,
		MILP: MILPOptions{TimeLimit: c.TimeLimit, MipRelGap: c.MipRelGap, Threads: c.Threads, Symmetry: sym}}, nil
}
