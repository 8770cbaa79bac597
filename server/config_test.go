package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/startup"
)

// TestConfigMetricsSequences: the per-sequence series name 1 to 1000
// sequences (0 is the default); anything else is refused at start,
// naming the range.
func TestConfigMetricsSequences(t *testing.T) {
	for _, tt := range []struct {
		n  int
		ok bool
	}{{0, true}, {1, true}, {1000, true}, {-1, false}, {1001, false}} {
		cfg := testConfig(t, "n1", t.TempDir())
		cfg.MetricsSequences = tt.n
		err := cfg.Validate()
		if tt.ok != (err == nil) || !tt.ok && (!errors.Is(err, startup.ErrBadConfig) || !strings.Contains(err.Error(), "want 1 to 1000")) {
			t.Errorf("metrics sequences %d: %v, want ok %v", tt.n, err, tt.ok)
		}
	}
}

// TestConfigMaxCountFitsTheLeadBound: a request's last ID may be at most the
// lead bound ahead of the clock, so a --max-count larger than the bound
// holds could never be served and is refused at start; every preset takes
// the default, sonyflake (the least capacity) included.
func TestConfigMaxCountFitsTheLeadBound(t *testing.T) {
	for _, tt := range []struct {
		preset   string
		window   time.Duration
		maxCount uint64
		ok       bool
	}{
		{"default", 0, DefaultMaxCount, true},
		{"sonyflake", 0, DefaultMaxCount, true},
		{"sonyflake", 0, 256_001, true},  // 10 s of 25,600 IDs/s, plus the first
		{"sonyflake", 0, 256_002, false}, // one more
		{"sonyflake", time.Minute, 1_000_000, true},
	} {
		cfg := testConfig(t, "n1", t.TempDir())
		cfg.Layout, cfg.ReserveWindow, cfg.MaxCount = layout.MustPreset(tt.preset), tt.window, tt.maxCount
		err := cfg.Validate()
		if tt.ok && err != nil {
			t.Errorf("%s, window %s, max count %d: %v", tt.preset, tt.window, tt.maxCount, err)
		}
		if !tt.ok && (!errors.Is(err, startup.ErrBadConfig) || !strings.Contains(err.Error(), "max count")) {
			t.Errorf("%s, window %s, max count %d: %v, want startup.ErrBadConfig naming the max count", tt.preset, tt.window, tt.maxCount, err)
		}
	}
}

// TestClockOffsetShiftsTheClockOnce: TestHooks.ClockOffset is added to
// Config.Clock, once: a Config handed on after its defaults were applied
// is not shifted again. Without the hook the clock is left alone.
func TestClockOffsetShiftsTheClockOnce(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := Config{Clock: func() time.Time { return base }}
	cfg.TestHooks.ClockOffset = func() time.Duration { return -time.Hour }
	once := cfg.withDefaults()
	if got := once.Clock(); !got.Equal(base.Add(-time.Hour)) {
		t.Fatalf("clock with a -1h offset reads %s, want %s", got, base.Add(-time.Hour))
	}
	if got := once.withDefaults().Clock(); !got.Equal(base.Add(-time.Hour)) {
		t.Fatalf("clock after defaults twice reads %s, want %s", got, base.Add(-time.Hour))
	}
	if got := (Config{Clock: func() time.Time { return base }}).withDefaults().Clock(); !got.Equal(base) {
		t.Fatalf("clock without hooks reads %s, want %s", got, base)
	}
}
