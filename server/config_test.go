package server

import (
	"errors"
	"strings"
	"testing"
	"time"
)

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
		cfg.Layout, cfg.ReserveWindow, cfg.MaxCount = mustPreset(t, tt.preset), tt.window, tt.maxCount
		err := cfg.Validate()
		if tt.ok && err != nil {
			t.Errorf("%s, window %s, max count %d: %v", tt.preset, tt.window, tt.maxCount, err)
		}
		if !tt.ok && (!errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "max count")) {
			t.Errorf("%s, window %s, max count %d: %v, want ErrBadConfig naming the max count", tt.preset, tt.window, tt.maxCount, err)
		}
	}
}
