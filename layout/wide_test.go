package layout

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var wideNames = []string{"uuidv7", "ulid"}

// TestUUIDv7RFCExample decodes the UUIDv7 example of RFC 9562 (appendix
// A.6), documented as Tuesday, February 22, 2022 2:22:22.00 PM GMT-05:00.
// Its rand_a and rand_b are random, so Ordo's layout reads them as a
// counter and a group; those values are worked out by hand from the bits:
// rand_a 0xCC3 then rand_b's first three bits after the variant, 011,
// give counter 0xCC3<<3|3; the next ten bits, 0001100010, group 98.
func TestUUIDv7RFCExample(t *testing.T) {
	l := MustPreset("uuidv7")
	const example = "017F22E2-79B0-7CC3-98C4-DC0C0C07398F"
	id, err := l.ParseWide(example)
	if err != nil {
		t.Fatalf("ParseWide(%s): %v", example, err)
	}
	if got, want := UUID(id).String(), strings.ToLower(example); got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	p, err := l.DecodeWide(id)
	if err != nil {
		t.Fatalf("DecodeWide: %v", err)
	}
	want := time.Date(2022, time.February, 22, 14, 22, 22, 0, time.FixedZone("GMT-05:00", -5*3600))
	if !p.Time.Equal(want) {
		t.Errorf("time %s, want %s", p.Time, want)
	}
	if p.Seq != 0xCC3<<3|3 || p.Group != 98 || p.Tick != uint64(want.UnixMilli())<<wideSeqBits|p.Seq {
		t.Errorf("counter %d, group %d, tick %d; want %d, 98, ms<<15|counter", p.Seq, p.Group, p.Tick, 0xCC3<<3|3)
	}
}

// TestULIDSpecVectors checks the examples of the ULID spec
// (github.com/ulid/spec) and of its reference implementation's tests.
func TestULIDSpecVectors(t *testing.T) {
	l := MustPreset("ulid")
	decode := func(s string) ([16]byte, Parts) {
		t.Helper()
		id, err := l.ParseWide(s)
		if err != nil {
			t.Fatalf("ParseWide(%s): %v", s, err)
		}
		p, err := l.DecodeWide(id)
		if err != nil {
			t.Fatalf("DecodeWide(%s): %v", s, err)
		}
		if got := ULID(id).String(); got != strings.ToUpper(s) {
			t.Errorf("String() = %s, want %s", got, strings.ToUpper(s))
		}
		return id, p
	}
	// ulid/javascript: encodeTime(1469918176385) is "01ARYZ6S41".
	if _, p := decode("01ARYZ6S41TSV4RRFFQ69G5FAV"); p.Time.UnixMilli() != 1469918176385 {
		t.Errorf("01ARYZ6S41…: time %d ms, want 1469918176385", p.Time.UnixMilli())
	}
	// The spec's own example, in either case.
	a, _ := decode("01ARZ3NDEKTSV4RRFFQ69G5FAV")
	if b, _ := decode("01arz3ndektsv4rrffq69g5fav"); a != b {
		t.Errorf("lower case reads as %x, upper case as %x", b, a)
	}
	// "The largest valid ULID ... 7ZZZZZZZZZZZZZZZZZZZZZZZZZ ... an epoch
	// time of 281474976710655 or 2^48 - 1."
	maxID, p := decode("7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
	if maxID != [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff} || p.Time.UnixMilli() != 1<<48-1 {
		t.Errorf("7ZZ…Z = %x, time %d; want all ones, 2^48-1", maxID, p.Time.UnixMilli())
	}
	if zero, _ := decode("00000000000000000000000000"); zero != ([16]byte{}) {
		t.Errorf("00…0 = %x, want zero", zero)
	}
	// The spec's monotonic example: the random part incremented by one
	// carries from Z into the next character.
	for _, pair := range [][2]string{
		{"01BX5ZZKBKACTAV9WEVGEMMVRY", "01BX5ZZKBKACTAV9WEVGEMMVRZ"},
		{"01BX5ZZKBKACTAV9WEVGEMMVRZ", "01BX5ZZKBKACTAV9WEVGEMMVS0"},
		{"01BX5ZZKBKACTAV9WEVGEMMVS0", "01BX5ZZKBKACTAV9WEVGEMMVS1"},
	} {
		x, _ := decode(pair[0])
		y, _ := decode(pair[1])
		if inc(x) != y {
			t.Errorf("%s + 1 = %s, want %s", pair[0], ULID(inc(x)), pair[1])
		}
	}
}

// TestWideFieldPlacement pins where Render puts each field, against values
// worked out by hand (Python's integers, not this package): the spec
// vectors fix the time alone, and a round trip through DecodeWide would
// pass with the counter and the group swapped in both directions.
func TestWideFieldPlacement(t *testing.T) {
	const ms, group, random = 0x0123456789AB, 0x2AA, 0x55AA55AA55AA55
	for _, tt := range []struct {
		preset   string
		counter  uint64
		wantHex  string
		wantText string
	}{
		// ms<<80 | counter<<65 | group<<55 | random (55 bits).
		{"ulid", 0x1234, "0123456789ab24695555aa55aa55aa55", "014D2PF2DB4HMNANDAAPN5BAJN"},
		// ms, version 7, the counter's 12 high bits; variant 10, its 3
		// low bits, group, random (49 bits).
		{"uuidv7", 0x5A5A, "0123456789ab7b4b9555aa55aa55aa55", "01234567-89ab-7b4b-9555-aa55aa55aa55"},
	} {
		l := MustPreset(tt.preset)
		id := l.Render(ms<<wideSeqBits|tt.counter, group, random)
		if got := hex.EncodeToString(id[:]); got != tt.wantHex {
			t.Errorf("%s: Render = %s, want %s", tt.preset, got, tt.wantHex)
		}
		text := UUID(id).String()
		if tt.preset == "ulid" {
			text = ULID(id).String()
		}
		if text != tt.wantText {
			t.Errorf("%s: text %s, want %s", tt.preset, text, tt.wantText)
		}
		p, err := l.DecodeWide(id)
		if err != nil || p.Time.UnixMilli() != ms || p.Seq != tt.counter || p.Group != group {
			t.Errorf("%s: DecodeWide = %+v, %v; want ms %d, counter %d, group %d", tt.preset, p, err, ms, tt.counter, group)
		}
	}
}

// inc adds one to a 128-bit big-endian number.
func inc(id [16]byte) [16]byte {
	for i := 15; i >= 0; i-- {
		id[i]++
		if id[i] != 0 {
			break
		}
	}
	return id
}

// TestWideBadInput gives each parser what it must refuse: every refusal is
// an error that wraps the sentinel named, never a panic or an ID.
func TestWideBadInput(t *testing.T) {
	uuid, ulid := MustPreset("uuidv7"), MustPreset("ulid")
	tests := []struct {
		l    Layout
		text string
		want error
	}{
		{uuid, "550e8400-e29b-41d4-a716-446655440000", ErrNotUUIDv7},   // version 4
		{uuid, "017f22e2-79b0-6cc3-98c4-dc0c0c07398f", ErrNotUUIDv7},   // version 6
		{uuid, "017f22e2-79b0-7cc3-18c4-dc0c0c07398f", ErrNotUUIDv7},   // NCS variant
		{uuid, "017f22e2-79b0-7cc3-d8c4-dc0c0c07398f", ErrNotUUIDv7},   // Microsoft variant
		{uuid, "00000000-0000-0000-0000-000000000000", ErrNotUUIDv7},   // nil UUID
		{uuid, "017f22e2x79b0-7cc3-98c4-dc0c0c07398f", ErrMalformedID}, // hyphen missing
		{uuid, "017f22e2-79b0-7cc3-98c4-dc0c0c07398g", ErrMalformedID}, // not hex
		{uuid, "017f22e2-79b0-7cc3-98c4-dc0c0c07398", ErrMalformedID},  // short
		{uuid, "", ErrMalformedID},
		{uuid, "01ARZ3NDEKTSV4RRFFQ69G5FAV", ErrMalformedID}, // a ULID
		{ulid, "01ARZ3NDEKTSV4RRFFQ69G5FAI", ErrMalformedID}, // I
		{ulid, "01ARZ3NDEKTSV4RRFFQ69G5FAL", ErrMalformedID}, // L
		{ulid, "01ARZ3NDEKTSV4RRFFQ69G5FAO", ErrMalformedID}, // O
		{ulid, "01ARZ3NDEKTSV4RRFFQ69G5FAU", ErrMalformedID}, // U
		{ulid, "01ARZ3NDEKTSV4RRFFQ69G5FA-", ErrMalformedID},
		{ulid, "01ARZ3NDEKTSV4RRFFQ69G5FA", ErrMalformedID},
		{ulid, "01ARZ3NDEKTSV4RRFFQ69G5FAVV", ErrMalformedID},
		{ulid, "80000000000000000000000000", ErrULIDOverflow},
		{ulid, "ZZZZZZZZZZZZZZZZZZZZZZZZZZ", ErrULIDOverflow},
		{ulid, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f", ErrMalformedID}, // a UUID
		{MustPreset("default"), "01ARZ3NDEKTSV4RRFFQ69G5FAV", ErrWrongWidth},
	}
	for _, tt := range tests {
		id, err := tt.l.ParseWide(tt.text)
		if !errors.Is(err, tt.want) || id != ([16]byte{}) {
			t.Errorf("%s ParseWide(%q) = %x, %v; want %v", tt.l, tt.text, id, err, tt.want)
		}
	}
	if _, err := MustPreset("default").DecodeWide([16]byte{}); !errors.Is(err, ErrWrongWidth) {
		t.Errorf("default DecodeWide = %v, want ErrWrongWidth", err)
	}
}

// TestWideValidate checks that the 128-bit layouts validate only as their
// unchanged presets, parse from their names, and keep their format through
// the JSON the replicated state stores; and that a 64-bit layout's JSON,
// as clusters made before them stored it, still reads as that layout.
func TestWideValidate(t *testing.T) {
	for _, name := range wideNames {
		l, err := Parse(name)
		if err != nil || !l.Wide() || l.String() != name || l.Format != Format(name) {
			t.Fatalf("Parse(%q) = %+v, %v", name, l, err)
		}
		changed := l
		changed.SeqBits++
		if err := changed.Validate(validationNow); !errors.Is(err, ErrInvalidLayout) {
			t.Errorf("%s with %d counter bits: Validate = %v, want ErrInvalidLayout", name, changed.SeqBits, err)
		}
		renamed := l
		renamed.Name = customName
		if err := renamed.Validate(validationNow); !errors.Is(err, ErrInvalidLayout) {
			t.Errorf("%s named custom: Validate = %v, want ErrInvalidLayout", name, err)
		}
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		var back Layout
		if err := json.Unmarshal(b, &back); err != nil || back != l {
			t.Errorf("JSON %s reads back as %+v, %v", b, back, err)
		}
		if err := l.CheckGroup(1<<wideGroupBits - 1); err != nil {
			t.Errorf("%s: CheckGroup(1023): %v", name, err)
		}
		if err := l.CheckGroup(1 << wideGroupBits); !errors.Is(err, ErrGroupTooLarge) {
			t.Errorf("%s: CheckGroup(1024) = %v, want ErrGroupTooLarge", name, err)
		}
		// TickAt's sentinel for a clock past the time field fits: the tick
		// is 63 bits.
		if got := l.TickAt(time.UnixMilli(1 << 48)); got != l.MaxTick()+1 || got == 0 {
			t.Errorf("%s: TickAt(2^48 ms) = %d, want MaxTick()+1 = %d", name, got, l.MaxTick()+1)
		}
	}
	def := MustPreset("default")
	var old Layout
	if err := json.Unmarshal([]byte(`{"name":"default","epoch_ms":1704067200000,"unit_ms":1,"time_bits":41,"group_bits":10,"seq_bits":12,"order":"time-group-seq"}`), &old); err != nil || old != def || old.Wide() {
		t.Errorf("a stored default layout reads as %+v, %v", old, err)
	}
	if b, _ := json.Marshal(def); strings.Contains(string(b), "format") {
		t.Errorf("a 64-bit layout's JSON names a format: %s", b)
	}
}

// TestWideOrder renders ticks around the edges of the counter and the time
// field with the random bits set against the order (all ones below, none
// above) and checks that bytes and text still sort by tick, and that
// DecodeWide gives back tick and group.
func TestWideOrder(t *testing.T) {
	for _, name := range wideNames {
		t.Run(name, func(t *testing.T) {
			l := MustPreset(name)
			seqMax := uint64(1)<<l.SeqBits - 1
			ms := uint64(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
			ticks := []uint64{0, 1, seqMax, seqMax + 1, ms << l.SeqBits, ms<<l.SeqBits | seqMax, (ms + 1) << l.SeqBits, l.MaxTick() - 1, l.MaxTick()}
			for _, group := range []uint64{0, 1, 512, 1<<l.GroupBits - 1} {
				var prevID [16]byte
				var prevText string
				for i, tick := range ticks {
					id := l.Render(tick, group, uint64(i%2)*^uint64(0))
					text := l.FormatWide(id)
					p, err := l.DecodeWide(id)
					if err != nil || p.Tick != tick || p.Group != group {
						t.Fatalf("DecodeWide(Render(%d, %d)) = %+v, %v", tick, group, p, err)
					}
					if back, err := l.ParseWide(text); err != nil || back != id {
						t.Fatalf("ParseWide(%s) = %x, %v; want %x", text, back, err, id)
					}
					if i > 0 && (bytes.Compare(prevID[:], id[:]) >= 0 || prevText >= text) {
						t.Fatalf("tick %d renders as %s, not above tick %d's %s", tick, text, ticks[i-1], prevText)
					}
					prevID, prevText = id, text
				}
			}
		})
	}
}

// TestRenderAll checks that a batch gets its ticks in order, the group,
// and random bits that differ from ID to ID, and that Render does not
// allocate.
func TestRenderAll(t *testing.T) {
	l := MustPreset("uuidv7")
	ticks := []uint64{100, 101, 102, 103}
	ids, err := RenderAll[UUID](l, ticks, 7)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		p, err := l.DecodeWide(id)
		if err != nil || p.Tick != ticks[i] || p.Group != 7 {
			t.Fatalf("ID %d: %+v, %v", i, p, err)
		}
	}
	// The last 48 of two IDs' 49 random bits agreeing by chance: 2^-48.
	if bytes.Equal(ids[0][10:], ids[1][10:]) {
		t.Errorf("two IDs share their random bits: %s %s", ids[0], ids[1])
	}
	// A tick past the last would wrap the time field to 0: refused, and
	// nothing of the batch comes back.
	if ids, err := RenderAll[UUID](l, []uint64{l.MaxTick(), l.MaxTick() + 1}, 7); !errors.Is(err, ErrTickRange) || ids != nil {
		t.Errorf("RenderAll past MaxTick = %v, %v; want ErrTickRange and no IDs", ids, err)
	}
	// A group past the 10-bit field would spill into the counter and the
	// variant bits: refused, with no IDs.
	if ids, err := RenderAll[UUID](l, ticks, 1<<wideGroupBits); !errors.Is(err, ErrGroupTooLarge) || ids != nil {
		t.Errorf("RenderAll with group 1024 = %v, %v; want ErrGroupTooLarge and no IDs", ids, err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = l.Render(12345, 7, 99) }); n != 0 {
		t.Errorf("Render allocates %v times", n)
	}
}

// FuzzWideRoundTrip renders two ticks of either format and checks that
// each decodes and parses back, and that bytes and canonical text order
// them as their ticks are ordered, whatever the random bits.
func FuzzWideRoundTrip(f *testing.F) {
	f.Add(false, uint64(1), uint64(2), uint64(0), ^uint64(0), uint64(0))
	f.Add(true, uint64(1)<<15-1, uint64(1)<<15, uint64(1023), uint64(0), ^uint64(0))
	f.Add(true, ^uint64(0), uint64(0), uint64(5), uint64(1), uint64(2))
	f.Fuzz(func(t *testing.T, ulid bool, tickA, tickB, group, randA, randB uint64) {
		l := MustPreset("uuidv7")
		if ulid {
			l = MustPreset("ulid")
		}
		tickA, tickB, group = tickA%(l.MaxTick()+1), tickB%(l.MaxTick()+1), group%(1<<l.GroupBits)
		a, b := l.Render(tickA, group, randA), l.Render(tickB, group, randB)
		for _, c := range []struct {
			tick uint64
			id   [16]byte
		}{{tickA, a}, {tickB, b}} {
			p, err := l.DecodeWide(c.id)
			if err != nil || p.Tick != c.tick || p.Group != group {
				t.Fatalf("%s: DecodeWide(Render(%d, %d)) = %+v, %v", l, c.tick, group, p, err)
			}
			if back, err := l.ParseWide(l.FormatWide(c.id)); err != nil || back != c.id {
				t.Fatalf("%s: ParseWide(%s) = %x, %v", l, l.FormatWide(c.id), back, err)
			}
		}
		if tickA == tickB {
			return
		}
		want := cmp.Compare(tickA, tickB)
		if got := bytes.Compare(a[:], b[:]); got != want {
			t.Fatalf("%s: ticks %d, %d compare %d, bytes %d", l, tickA, tickB, want, got)
		}
		if got := strings.Compare(l.FormatWide(a), l.FormatWide(b)); got != want {
			t.Fatalf("%s: ticks %d, %d compare %d, text %s, %s %d", l, tickA, tickB, want, l.FormatWide(a), l.FormatWide(b), got)
		}
	})
}

// FuzzParseWide feeds arbitrary text to both 128-bit parsers: no panic,
// every refusal wraps a sentinel, and what is accepted prints as
// canonical text that parses back to the same ID.
func FuzzParseWide(f *testing.F) {
	for _, s := range []string{"017F22E2-79B0-7CC3-98C4-DC0C0C07398F", "017f22e279b07cc398c4dc0c0c07398f", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "80000000000000000000000000", "550e8400-e29b-41d4-a716-446655440000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, name := range wideNames {
			l := MustPreset(name)
			id, err := l.ParseWide(s)
			if err != nil {
				if !wrapsSentinel(err) {
					t.Fatalf("%s ParseWide(%q): %v wraps no sentinel", name, s, err)
				}
				continue
			}
			if back, err := l.ParseWide(l.FormatWide(id)); err != nil || back != id {
				t.Fatalf("%s: %q → %s → %x, %v", name, s, l.FormatWide(id), back, err)
			}
		}
	})
}

// TestWideJSON: UUIDs and ULIDs go through encoding/json as their
// canonical text and back, and bad text is refused with its sentinel.
func TestWideJSON(t *testing.T) {
	type ids struct {
		U UUID
		L ULID
	}
	u, err := ParseUUID("017f22e2-79b0-7cc3-98c4-dc0c0c07398f")
	if err != nil {
		t.Fatal(err)
	}
	l, err := ParseULID("01ARYZ6S41TSV4RRFFQ69G5FAV")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(ids{u, l})
	if want := `{"U":"017f22e2-79b0-7cc3-98c4-dc0c0c07398f","L":"01ARYZ6S41TSV4RRFFQ69G5FAV"}`; err != nil || string(b) != want {
		t.Fatalf("json.Marshal = %s, %v; want %s", b, err, want)
	}
	var back ids
	if err := json.Unmarshal(b, &back); err != nil || back != (ids{u, l}) {
		t.Fatalf("json.Unmarshal(%s) = %+v, %v", b, back, err)
	}
	if err := json.Unmarshal([]byte(`{"L":"01ARYZ6S41TSV4RRFFQ69G5FAI"}`), &back); !errors.Is(err, ErrMalformedID) {
		t.Errorf("a ULID with an I: %v, want ErrMalformedID", err)
	}
	if err := json.Unmarshal([]byte(`{"U":"not a uuid"}`), &back); !errors.Is(err, ErrMalformedID) {
		t.Errorf("a bad UUID: %v, want ErrMalformedID", err)
	}
}
