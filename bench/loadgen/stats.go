package main

import (
	"math"
	"sort"
)

// percentile of sorted values by nearest rank (p in (0, 100]); 0 for no values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// dist summarizes values: how many, p50, p99 (only when at least 100 values lie above it, as
// everywhere in Overworld's benchmarks: otherwise the field is absent and max says the rest),
// max and mean.
type dist struct {
	Samples int      `json:"samples"`
	P50     float64  `json:"p50"`
	P99     *float64 `json:"p99,omitempty"`
	Max     float64  `json:"max"`
	Mean    float64  `json:"mean"`
}

func summarize(values []float64) dist {
	if len(values) == 0 {
		return dist{}
	}
	sort.Float64s(values)
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	d := dist{
		Samples: len(values),
		P50:     round2(percentile(values, 50)),
		Max:     round2(values[len(values)-1]),
		Mean:    round2(sum / float64(len(values))),
	}
	if len(values) >= 10000 {
		p := round2(percentile(values, 99))
		d.P99 = &p
	}
	return d
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }
