package bench

import (
	"context"
	"errors"
	"testing"
	"time"
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
