package api

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestHandleRoundTrips(t *testing.T) {
	for _, h := range []Handle{{First: 1, Count: 1}, {First: 12345, Count: 7}, {First: math.MaxUint64 - 10, Count: 10},
		{First: 1, Count: 1, Seq: "a"}, {First: 12, Count: 3, Seq: "orders.v2"}, {First: 5, Count: 5, Seq: "5"}} {
		got, err := ParseHandle(h.String())
		if err != nil || got != h {
			t.Errorf("ParseHandle(%q) = %v, %v; want %v", h.String(), got, err, h)
		}
	}
}

func TestParseHandleRefusesWhatNoNodeHandsOut(t *testing.T) {
	for _, s := range []string{"", "r1.", "r1.5", "r1.5.", "r1..5", "r2.5.5", "r1.0.5", "r1.5.0", "r1.-5.5", "r1.5.5.5",
		"r1.18446744073709551615.2", "x1.5.5", "r1.99999999999999999999.1",
		"s1.5.5", "s1..5.5", "s1.A.5.5", "s1.a", "s1.a.5", "s1.a.5.", "s1.a.0.5", "s1.a b.5.5", "s1.-a.5.5", "s1." + strings.Repeat("a", 64) + ".5.5"} {
		if _, err := ParseHandle(s); !errors.Is(err, ErrBadHandle) {
			t.Errorf("ParseHandle(%q) = %v, want ErrBadHandle", s, err)
		}
	}
}
