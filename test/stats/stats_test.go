package stats

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestPercentileIsNearestRank(t *testing.T) {
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100 ... 1, unsorted
	}
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"none", nil, 0.99, 0},
		{"one", ms(7), 0.5, 7 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(hundred...), 0.99, 99 * time.Millisecond},
		{"p100 of 100", ms(hundred...), 1, 100 * time.Millisecond},
		{"p50 of 100", ms(hundred...), 0.5, 50 * time.Millisecond},
		{"p99 of 10 is the worst, not the one below it", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond},
		{"p50 of 4 is the 2nd", ms(40, 10, 30, 20), 0.5, 20 * time.Millisecond},
		{"p50 of 5 is the 3rd", ms(5, 1, 4, 2, 3), 0.5, 3 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Percentile(tc.samples, tc.p))
		})
	}
}
