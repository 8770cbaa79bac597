package main

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/seed-e8569b35/ordo/layout"
)

// TestDecodeID checks `ordo decode`'s reading of one ID: 64-bit IDs under
// --layout, UUIDv7s and ULIDs told apart by their length (the RFC 9562
// and ULID spec examples, which Ordo did not make), and the refusals.
func TestDecodeID(t *testing.T) {
	def := layout.MustPreset("default")
	uuid := layout.MustPreset("uuidv7")
	tests := []struct {
		arg      string
		l        layout.Layout
		explicit bool
		wantMs   int64
		wantErr  error
	}{
		{"017F22E2-79B0-7CC3-98C4-DC0C0C07398F", def, false, 1645557742000, nil},
		{"017f22e279b07cc398c4dc0c0c07398f", def, false, 1645557742000, nil},
		{"017f22e2-79b0-7cc3-98c4-dc0c0c07398f", uuid, true, 1645557742000, nil},
		{"01ARYZ6S41TSV4RRFFQ69G5FAV", def, false, 1469918176385, nil},
		// Shaped as PostgreSQL 18's uuidv7() makes them (RFC 9562 §6.2
		// method 3: rand_a holds a fraction of the millisecond).
		{"0193a5c4-3b2e-7a8c-b1d2-e3f4a5b6c7d8", def, false, 1733652921134, nil},
		{"5", def, false, 1704067200000, nil},
		{"550e8400-e29b-41d4-a716-446655440000", def, false, 0, layout.ErrNotUUIDv7},
		{"550e8400-e29b-41d4-a716-446655440000", uuid, true, 0, layout.ErrNotUUIDv7},
		{"01ARYZ6S41TSV4RRFFQ69G5FAI", def, false, 0, layout.ErrMalformedID},
		{"81ARYZ6S41TSV4RRFFQ69G5FAV", def, false, 0, layout.ErrULIDOverflow},
		{"01ARYZ6S41TSV4RRFFQ69G5FAV", uuid, true, 0, layout.ErrMalformedID},
	}
	for _, tt := range tests {
		p, err := decodeID(tt.arg, tt.l, tt.explicit)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("decodeID(%q, %s) = %+v, %v; want %v", tt.arg, tt.l, p, err, tt.wantErr)
			}
			continue
		}
		if err != nil || p.Time.UnixMilli() != tt.wantMs {
			t.Errorf("decodeID(%q, %s) = %+v, %v; want time %d ms", tt.arg, tt.l, p, err, tt.wantMs)
		}
	}
	// With --layout given, a 64-bit layout does not guess.
	if _, err := decodeID("01ARYZ6S41TSV4RRFFQ69G5FAV", def, true); err == nil {
		t.Error("a ULID under an explicit --layout default decoded")
	}
	for _, arg := range []string{"", "abc", "-1", "18446744073709551616"} {
		if _, err := decodeID(arg, def, false); err == nil {
			t.Errorf("decodeID(%q) decoded", arg)
		}
	}
	// Decimal digits only are a 64-bit ID that overflows, never a guessed
	// ULID (26 characters) or UUIDv7 (32; this one has version 7 and
	// variant 10); an explicit --layout still reads them.
	for arg, spec := range map[string]string{"01234567890123456789012345": "ulid", "01890000000070008000000000000000": "uuidv7"} {
		if p, err := decodeID(arg, def, false); !errors.Is(err, strconv.ErrRange) {
			t.Errorf("decodeID(%q) = %+v, %v; want the 64-bit overflow", arg, p, err)
		}
		wide := layout.MustPreset(spec)
		if _, err := decodeID(arg, wide, true); err != nil {
			t.Errorf("decodeID(%q) under --layout %s: %v", arg, spec, err)
		}
	}
}

// TestDecodeRefusesTheSignBit: a 64-bit layout whose fields fill 63 bits
// never sets bit 63, so an ID with it set is refused, naming the bit and
// --layout; the largest ID such a layout makes decodes, and so does the
// same number under discord, whose time field owns the sign bit.
func TestDecodeRefusesTheSignBit(t *testing.T) {
	def := layout.MustPreset("default")
	for _, arg := range []string{"18446744073709551615", "9223372036854775808"} {
		_, err := decodeID(arg, def, false)
		if err == nil || !strings.Contains(err.Error(), "not an ID of layout default") || !strings.Contains(err.Error(), "sign bit") || !strings.Contains(err.Error(), "--layout") {
			t.Errorf("decodeID(%s, default) = %v; want a refusal naming the sign bit and --layout", arg, err)
		}
	}
	if err := runDecode([]string{"18446744073709551615"}); !errors.Is(err, errUsage) {
		t.Errorf("ordo decode 18446744073709551615: %v, want a usage error (exit 2)", err)
	}
	if p, err := decodeID("9223372036854775807", def, false); err != nil || p.Time.Year() != 2093 {
		t.Errorf("decodeID(2^63-1, default) = %+v, %v; want the last unit, in 2093", p, err)
	}
	if p, err := decodeID("18446744073709551615", layout.MustPreset("discord"), true); err != nil || p.Time.Year() != 2154 {
		t.Errorf("decodeID(2^64-1, discord) = %+v, %v; want the last unit, in 2154", p, err)
	}
}
