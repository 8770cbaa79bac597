package api

import (
	"errors"
	"math"
	"testing"
)

func TestHandleRoundTrips(t *testing.T) {
	for _, h := range []Handle{{1, 1}, {12345, 7}, {math.MaxUint64 - 10, 10}} {
		got, err := ParseHandle(h.String())
		if err != nil || got != h {
			t.Errorf("ParseHandle(%q) = %v, %v; want %v", h.String(), got, err, h)
		}
	}
}

func TestParseHandleRefusesWhatNoNodeHandsOut(t *testing.T) {
	for _, s := range []string{"", "r1.", "r1.5", "r1.5.", "r1..5", "r2.5.5", "r1.0.5", "r1.5.0", "r1.-5.5", "r1.5.5.5",
		"r1.18446744073709551615.2", "x1.5.5", "r1.99999999999999999999.1"} {
		if _, err := ParseHandle(s); !errors.Is(err, ErrBadHandle) {
			t.Errorf("ParseHandle(%q) = %v, want ErrBadHandle", s, err)
		}
	}
}
