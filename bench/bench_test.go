package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/history"
)

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 501, 0.9: 901, 0.99: 991, 0.999: 1000, 1: 1000} {
		if got := percentile(d, q); got != want {
			t.Errorf("percentile(%v) = %d, want %d", q, got, want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of nothing = %d", got)
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Addrs: []string{"x:1"}, Concurrency: 0, Count: 1, Duration: time.Second},
		{Addrs: []string{"x:1"}, Concurrency: 1, Count: 0, Duration: time.Second},
		{Addrs: []string{"x:1"}, Concurrency: 1, Count: 1},
	} {
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrBadConfig) {
			t.Errorf("Run(%+v) = %v, want ErrBadConfig", cfg, err)
		}
	}
}

// TestLongestGap: the gap counts only successful completions inside the
// run, and the edges of the run.
func TestLongestGap(t *testing.T) {
	ms := time.Millisecond
	ops := []history.Op{
		{End: 10 * ms, Outcome: history.OK},
		{End: 20 * ms, Outcome: history.OK},
		{End: 50 * ms, Outcome: history.Unknown}, // a failure fills no gap
		{End: 90 * ms, Outcome: history.OK},
		{End: 500 * ms, Outcome: history.OK}, // after the run
	}
	if got, want := longestGap(ops, 0, 100*ms), 70*ms; got != want {
		t.Fatalf("longest gap %s, want %s", got, want)
	}
	if got, want := longestGap(nil, 0, 100*ms), 100*ms; got != want {
		t.Fatalf("longest gap with no success %s, want %s", got, want)
	}
}
