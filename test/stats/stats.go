// Package stats holds the few statistics the benchmarks and the soak
// report, computed one way for all of them.
package stats

import (
	"math"
	"slices"
	"time"
)

// Percentile is the nearest-rank p-quantile of d (0 < p <= 1): the
// smallest sample that at least p of all samples are at or below. Over
// fewer than 100 samples, p = 0.99 is the largest sample, never the one
// below it (int(p*(n-1)) took that one). It returns 0 for no samples.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := int(math.Ceil(p * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}
