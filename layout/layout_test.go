package layout

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// presetNameList is every preset, so that per-preset tests cannot forget one.
var presetNameList = []string{"default", "twitter", "discord", "instagram", "sonyflake"}

// validationNow is the fixed "now" for Validate calls, so no test depends on
// the wall clock.
var validationNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustParse(t testing.TB, spec string) Layout {
	t.Helper()
	l, err := Parse(spec)
	if err != nil {
		t.Fatalf("Parse(%q): %v", spec, err)
	}
	return l
}

func mustTime(t testing.TB, layout, value string) time.Time {
	t.Helper()
	v, err := time.Parse(layout, value)
	if err != nil {
		t.Fatalf("time.Parse(%q, %q): %v", layout, value, err)
	}
	return v
}

func TestPresetsValidate(t *testing.T) {
	for _, name := range presetNameList {
		l, err := Preset(name)
		if err != nil {
			t.Fatalf("Preset(%q): %v", name, err)
		}
		if l.Name != name {
			t.Errorf("Preset(%q).Name = %q", name, l.Name)
		}
		if err := l.Validate(validationNow); err != nil {
			t.Errorf("Preset(%q).Validate: %v", name, err)
		}
	}
}

// TestMustPreset: MustPreset is Preset for a preset's name, and panics with
// Preset's error for any other.
func TestMustPreset(t *testing.T) {
	for _, name := range presetNameList {
		want, err := Preset(name)
		if err != nil {
			t.Fatalf("Preset(%q): %v", name, err)
		}
		if got := MustPreset(name); got != want {
			t.Errorf("MustPreset(%q) = %+v, want %+v", name, got, want)
		}
	}
	defer func() {
		err, _ := recover().(error)
		if !errors.Is(err, ErrUnknownPreset) {
			t.Errorf("MustPreset(\"snowflake\") panicked with %v, want ErrUnknownPreset", err)
		}
	}()
	MustPreset("snowflake")
	t.Error("MustPreset(\"snowflake\") returned")
}

func TestPresetValues(t *testing.T) {
	tests := []struct {
		name           string
		epoch          time.Time
		unitMs         int64
		timeBits       uint
		groupBits      uint
		seqBits        uint
		order          Order
		totalBitsInUse uint
	}{
		{"default", time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), 1, 41, 10, 12, OrderTimeGroupSeq, 63},
		{"twitter", time.UnixMilli(1288834974657), 1, 41, 10, 12, OrderTimeGroupSeq, 63},
		{"discord", time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC), 1, 42, 10, 12, OrderTimeGroupSeq, 64},
		{"instagram", time.UnixMilli(1314220021721), 1, 41, 13, 10, OrderTimeGroupSeq, 64},
		{"sonyflake", time.Date(2014, 9, 1, 0, 0, 0, 0, time.UTC), 10, 39, 16, 8, OrderTimeSeqGroup, 63},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Preset(tt.name)
			if err != nil {
				t.Fatalf("Preset(%q): %v", tt.name, err)
			}
			want := Layout{
				Name: tt.name, EpochMs: tt.epoch.UnixMilli(), UnitMs: tt.unitMs,
				TimeBits: tt.timeBits, GroupBits: tt.groupBits, SeqBits: tt.seqBits, Order: tt.order,
			}
			if l != want {
				t.Errorf("Preset(%q) = %+v, want %+v", tt.name, l, want)
			}
			if sum := l.TimeBits + l.GroupBits + l.SeqBits; sum != tt.totalBitsInUse {
				t.Errorf("widths sum to %d, want %d", sum, tt.totalBitsInUse)
			}
		})
	}
}

// TestKnownIDs encodes and decodes IDs published for each preset's
// original system. Sources:
//
//   - discord: Discord developer docs, API Reference → "Snowflakes"
//     (discord/discord-api-docs, docs/Reference.md and its snowflake.png
//     diagram): 175928847299117063 = 2016-04-30 11:18:25.796 UTC, internal
//     worker 1, process 0, increment 7 (the group field is worker<<5 |
//     process = 32). The same ID and parts are asserted in the nyxx Dart
//     library's Snowflake tests.
//   - discord: npm package discord-snowflake README: 90339695967350784 →
//     timestamp 1441609061949 (2015-09-07T06:57:41.949Z), worker 0,
//     process 3, increment 0.
//   - twitter: Twitter/X developer docs, Tweet object data dictionary
//     example: "id": 1050118621198921728, "created_at": "Wed Oct 10
//     20:19:24 +0000 2018". The docs give seconds only; the .211 ms and the
//     group (datacenter 10, worker 27 → 347) are read from the ID's bits.
//   - instagram: Instagram Engineering, "Sharding & IDs at Instagram"
//     (2012): id = 1387263000 << (64-41); id |= 1341 << (64-41-13);
//     id |= 5001 % 1024 (= 905). The post does not print the resulting
//     number; 11637205501278089 is that expression evaluated. Its time is
//     1387263000 ms after the epoch 1314220021721 used in the same post's
//     PL/pgSQL (the prose's "January 1st, 2011" does not match that number).
//   - sonyflake: no fixed example ID is published (the sony/sonyflake
//     README and tests only generate live IDs), so this one is computed
//     from the documented layout — README: "39 bits for time in units of
//     10 msec, 8 bits for a sequence number, 16 bits for a machine id",
//     default StartTime 2014-09-01 00:00:00 UTC, and sonyflake.go toID():
//     elapsedTime<<(8+16) | sequence<<16 | machineID. Time 2024-01-01 UTC
//     is 29453760000 units, sequence 5, machine 0x0101 (the lower 16 bits
//     of a private IP such as 10.0.1.1, Sonyflake's default machine ID).
//   - default: Ordo's own layout has no outside documentation; the ID is
//     computed by hand: 2025-01-01T00:00:00.001Z is 31622400001 ms after
//     2024-01-01, group 1, sequence 2 → 31622400001<<22 | 1<<12 | 2.
func TestKnownIDs(t *testing.T) {
	tests := []struct {
		name    string
		preset  string
		id      uint64
		at      time.Time // start of the ID's time unit
		group   uint64
		seq     uint64
		created string // documented time.RubyDate timestamp, if coarser than at
	}{
		{
			name: "discord docs", preset: "discord", id: 175928847299117063,
			at: time.Date(2016, 4, 30, 11, 18, 25, 796e6, time.UTC), group: 1<<5 | 0, seq: 7,
		},
		{
			name: "discord-snowflake README", preset: "discord", id: 90339695967350784,
			at: time.UnixMilli(1441609061949), group: 0<<5 | 3, seq: 0,
		},
		{
			name: "twitter tweet object", preset: "twitter", id: 1050118621198921728,
			at: time.Date(2018, 10, 10, 20, 19, 24, 211e6, time.UTC), group: 10<<5 | 27, seq: 0,
			created: "Wed Oct 10 20:19:24 +0000 2018",
		},
		{
			name: "instagram blog", preset: "instagram", id: 11637205501278089,
			at: time.UnixMilli(1314220021721 + 1387263000), group: 1341, seq: 5001 % 1024,
		},
		{
			name: "sonyflake documented layout", preset: "sonyflake", id: 494152093532487937,
			at: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), group: 0x0101, seq: 5,
		},
		{
			name: "default hand computed", preset: "default", id: 132633958813798402,
			at: time.Date(2025, 1, 1, 0, 0, 0, 1e6, time.UTC), group: 1, seq: 2,
		},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.preset] = true
		t.Run(tt.name, func(t *testing.T) {
			l := MustPreset(tt.preset)
			if err := l.CheckGroup(tt.group); err != nil {
				t.Fatalf("CheckGroup(%d): %v", tt.group, err)
			}
			tick := l.TickAt(tt.at) | tt.seq

			if got := l.ID(tick, tt.group); got != tt.id {
				t.Errorf("ID(%d, %d) = %d, want %d", tick, tt.group, got, tt.id)
			}
			if got := l.Tick(tt.id); got != tick {
				t.Errorf("Tick(%d) = %d, want %d", tt.id, got, tick)
			}
			p := l.Decode(tt.id)
			if !p.Time.Equal(tt.at) || p.Time.Location() != time.UTC {
				t.Errorf("Decode(%d).Time = %v, want %v in UTC", tt.id, p.Time, tt.at.UTC())
			}
			if p.Group != tt.group || p.Seq != tt.seq || p.Tick != tick {
				t.Errorf("Decode(%d) = group %d seq %d tick %d, want group %d seq %d tick %d",
					tt.id, p.Group, p.Seq, p.Tick, tt.group, tt.seq, tick)
			}
			if tt.created != "" {
				doc := mustTime(t, time.RubyDate, tt.created)
				if got := p.Time.Truncate(time.Second); !got.Equal(doc) {
					t.Errorf("Decode(%d).Time to the second = %v, documented %v", tt.id, got, doc)
				}
			}
		})
	}
	for _, name := range presetNameList {
		if !covered[name] {
			t.Errorf("no known ID for preset %q", name)
		}
	}
}

// TestSequenceBoundary checks that the tick after the last sequence number
// of a unit moves to sequence 0 of the next unit and still gives a larger
// ID, and that Step is the ID difference inside a unit.
func TestSequenceBoundary(t *testing.T) {
	for _, name := range presetNameList {
		t.Run(name, func(t *testing.T) {
			l := MustPreset(name)
			seqMax := uint64(1)<<l.SeqBits - 1
			group := uint64(1)<<l.GroupBits - 1 // all group bits set: the worst case for spill-over
			last := uint64(5)<<l.SeqBits | seqMax
			next := last + 1

			pl, pn := l.Decode(l.ID(last, group)), l.Decode(l.ID(next, group))
			if pl.Seq != seqMax || pn.Seq != 0 {
				t.Errorf("seq %d → %d, want %d → 0", pl.Seq, pn.Seq, seqMax)
			}
			if d := pn.Time.Sub(pl.Time); d != time.Duration(l.UnitMs)*time.Millisecond {
				t.Errorf("time advanced by %v, want one unit of %d ms", d, l.UnitMs)
			}
			if pl.Group != group || pn.Group != group {
				t.Errorf("group changed across the boundary: %d, %d", pl.Group, pn.Group)
			}
			if l.ID(next, group) <= l.ID(last, group) {
				t.Errorf("ID(%d) = %d is not above ID(%d) = %d", next, l.ID(next, group), last, l.ID(last, group))
			}
			inUnit := uint64(5) << l.SeqBits
			if d := l.ID(inUnit+1, group) - l.ID(inUnit, group); d != l.Step() {
				t.Errorf("ID difference inside a unit = %d, Step() = %d", d, l.Step())
			}
		})
	}
}

func TestStep(t *testing.T) {
	if got := MustPreset("default").Step(); got != 1 {
		t.Errorf("default Step() = %d, want 1", got)
	}
	if got := MustPreset("sonyflake").Step(); got != 1<<16 {
		t.Errorf("sonyflake Step() = %d, want %d", got, 1<<16)
	}
}

// TestTimeBoundary checks MaxTick: the largest tick with the largest group
// sets every bit the layout uses, and decodes back to the last time unit.
func TestTimeBoundary(t *testing.T) {
	for _, name := range presetNameList {
		t.Run(name, func(t *testing.T) {
			l := MustPreset(name)
			width := l.TimeBits + l.GroupBits + l.SeqBits
			group := uint64(1)<<l.GroupBits - 1
			wantMaxTick := uint64(1)<<(l.TimeBits+l.SeqBits) - 1
			if got := l.MaxTick(); got != wantMaxTick {
				t.Fatalf("MaxTick() = %d, want %d", got, wantMaxTick)
			}
			id := l.ID(l.MaxTick(), group)
			if want := ^uint64(0) >> (64 - width); id != want {
				t.Errorf("ID(MaxTick, max group) = %#x, want all %d bits set (%#x)", id, width, want)
			}
			p := l.Decode(id)
			lastUnit := int64(1)<<l.TimeBits - 1
			if want := time.UnixMilli(l.EpochMs + lastUnit*l.UnitMs); !p.Time.Equal(want) {
				t.Errorf("Decode(max).Time = %v, want %v", p.Time, want.UTC())
			}
			if p.Tick != l.MaxTick() || p.Group != group || p.Seq != uint64(1)<<l.SeqBits-1 {
				t.Errorf("Decode(max) = %+v", p)
			}
			if prev := l.ID(l.MaxTick()-1, group); prev >= id {
				t.Errorf("ID(MaxTick-1) = %d is not below ID(MaxTick) = %d", prev, id)
			}
			// A clock past the last unit must not wrap to a small tick.
			if got := l.TickAt(p.Time.Add(time.Duration(l.UnitMs) * time.Millisecond)); got != l.MaxTick()+1 {
				t.Errorf("TickAt(after last unit) = %d, want MaxTick()+1 = %d", got, l.MaxTick()+1)
			}
			if got := l.TickAt(p.Time); got != l.MaxTick()&^(uint64(1)<<l.SeqBits-1) {
				t.Errorf("TickAt(last unit) = %d, want first tick of the last unit", got)
			}
		})
	}
}

func TestTickAt(t *testing.T) {
	def := MustPreset("default")
	sony := MustPreset("sonyflake")
	epoch := func(l Layout) time.Time { return time.UnixMilli(l.EpochMs) }
	tests := []struct {
		name string
		l    Layout
		at   time.Time
		want uint64
	}{
		{"long before epoch", def, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), 0},
		{"1ns before epoch", def, epoch(def).Add(-time.Nanosecond), 0},
		{"before the Unix epoch", def, time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC), 0},
		{"at epoch", def, epoch(def), 0},
		{"within first unit", def, epoch(def).Add(999 * time.Microsecond), 0},
		{"second unit", def, epoch(def).Add(time.Millisecond), 1 << 12},
		{"one second", def, epoch(def).Add(time.Second), 1000 << 12},
		{"sonyflake within first unit", sony, epoch(sony).Add(9 * time.Millisecond), 0},
		{"sonyflake second unit", sony, epoch(sony).Add(15 * time.Millisecond), 1 << 8},
		{"sonyflake before epoch", sony, epoch(sony).Add(-time.Hour), 0},
	}
	for _, tt := range tests {
		if got := tt.l.TickAt(tt.at); got != tt.want {
			t.Errorf("%s: TickAt(%v) = %d, want %d", tt.name, tt.at, got, tt.want)
		}
	}
}

func TestTicksIn(t *testing.T) {
	def := MustPreset("default")
	sony := MustPreset("sonyflake")
	tests := []struct {
		name string
		l    Layout
		d    time.Duration
		want uint64
	}{
		{"zero", def, 0, 0},
		{"negative", def, -time.Second, 0},
		{"1ns rounds up to one unit", def, time.Nanosecond, 1 << 12},
		{"1.5ms is one whole unit", def, 1500 * time.Microsecond, 1 << 12},
		{"one second", def, time.Second, 1000 << 12},
		{"sonyflake 1ms", sony, time.Millisecond, 1 << 8},
		{"sonyflake 25ms", sony, 25 * time.Millisecond, 2 << 8},
		{"longer than the time field", def, 100 * 365 * 24 * time.Hour, def.MaxTick() + 1},
	}
	for _, tt := range tests {
		if got := tt.l.TicksIn(tt.d); got != tt.want {
			t.Errorf("%s: TicksIn(%v) = %d, want %d", tt.name, tt.d, got, tt.want)
		}
	}
}

func TestCheckGroup(t *testing.T) {
	noGroup := Layout{Name: "custom", EpochMs: 0, UnitMs: 1, TimeBits: 41, GroupBits: 0, SeqBits: 22, Order: OrderTimeGroupSeq}
	tests := []struct {
		l       Layout
		group   uint64
		wantErr bool
	}{
		{MustPreset("default"), 0, false},
		{MustPreset("default"), 1023, false},
		{MustPreset("default"), 1024, true},
		{MustPreset("instagram"), 8191, false},
		{MustPreset("instagram"), 8192, true},
		{MustPreset("sonyflake"), 65535, false},
		{MustPreset("sonyflake"), 65536, true},
		{noGroup, 0, false},
		{noGroup, 1, true},
	}
	for _, tt := range tests {
		err := tt.l.CheckGroup(tt.group)
		if tt.wantErr != (err != nil) {
			t.Errorf("%s: CheckGroup(%d) = %v, want error %v", tt.l, tt.group, err, tt.wantErr)
		}
		if err != nil && (!errors.Is(err, ErrGroupTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(tt.group))) {
			t.Errorf("%s: CheckGroup(%d) = %v, want ErrGroupTooLarge naming the group", tt.l, tt.group, err)
		}
	}
}

func TestParseRoundTrip(t *testing.T) {
	for _, name := range presetNameList {
		t.Run(name, func(t *testing.T) {
			l := mustParse(t, name)
			if want := MustPreset(name); l != want {
				t.Errorf("Parse(%q) = %+v, want %+v", name, l, want)
			}
			if s := l.String(); s != name {
				t.Errorf("String() = %q, want %q", s, name)
			}
			if back := mustParse(t, l.String()); back != l {
				t.Errorf("Parse(String()) = %+v, want %+v", back, l)
			}
		})
	}

	customs := []struct {
		spec      string
		canonical string
		want      Layout
	}{
		{
			spec:      "custom:epoch=1704067200000,unit=1,bits=41/10/12",
			canonical: "custom:epoch=1704067200000,unit=1,bits=41/10/12",
			want:      Layout{Name: "custom", EpochMs: 1704067200000, UnitMs: 1, TimeBits: 41, GroupBits: 10, SeqBits: 12, Order: OrderTimeGroupSeq},
		},
		{
			spec:      "  custom:bits=40/7/16,order=time-seq-group,unit=4,epoch=1600000000000\n",
			canonical: "custom:epoch=1600000000000,unit=4,bits=40/7/16,order=time-seq-group",
			want:      Layout{Name: "custom", EpochMs: 1600000000000, UnitMs: 4, TimeBits: 40, GroupBits: 7, SeqBits: 16, Order: OrderTimeSeqGroup},
		},
		{
			spec:      "custom:epoch=0,unit=1,bits=41/0/22,order=time-group-seq",
			canonical: "custom:epoch=0,unit=1,bits=41/0/22",
			want:      Layout{Name: "custom", EpochMs: 0, UnitMs: 1, TimeBits: 41, GroupBits: 0, SeqBits: 22, Order: OrderTimeGroupSeq},
		},
	}
	for _, tt := range customs {
		t.Run(tt.canonical, func(t *testing.T) {
			l := mustParse(t, tt.spec)
			if l != tt.want {
				t.Errorf("Parse(%q) = %+v, want %+v", tt.spec, l, tt.want)
			}
			if s := l.String(); s != tt.canonical {
				t.Errorf("String() = %q, want %q", s, tt.canonical)
			}
			if back := mustParse(t, l.String()); back != l {
				t.Errorf("Parse(String()) = %+v, want %+v", back, l)
			}
		})
	}

	// A changed preset must not print as the preset it no longer is.
	l := MustPreset("twitter")
	l.EpochMs++
	if s := l.String(); s != "custom:epoch=1288834974658,unit=1,bits=41/10/12" {
		t.Errorf("changed twitter preset String() = %q", s)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	for _, name := range presetNameList {
		l := MustPreset(name)
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatalf("Marshal(%s): %v", name, err)
		}
		var back Layout
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", b, err)
		}
		if back != l {
			t.Errorf("JSON round trip of %s = %+v, want %+v", name, back, l)
		}
	}
}

// TestRejected checks that every bad layout or spec is refused with the
// expected sentinel and a message naming the bad value.
func TestRejected(t *testing.T) {
	valid := MustPreset("default")
	with := func(change func(*Layout)) Layout {
		l := valid
		l.Name = "custom"
		change(&l)
		return l
	}
	discord := MustPreset("discord")
	discord.SeqBits = 13 // no longer the preset, so 64 bits is no longer allowed

	layouts := []struct {
		name    string
		l       Layout
		want    error
		message string
	}{
		{"widths sum to 64", with(func(l *Layout) { l.SeqBits = 13 }), ErrInvalidLayout, "widths 41+10+13 = 64, want 63"},
		{"widths sum to 62", with(func(l *Layout) { l.SeqBits = 11 }), ErrInvalidLayout, "widths 41+10+11 = 62, want 63"},
		{"changed discord preset", discord, ErrInvalidLayout, "widths 42+10+13 = 65, want 63"},
		{"custom copy of discord widths", with(func(l *Layout) { l.TimeBits = 42 }), ErrInvalidLayout, "42+10+12 = 64, want 63"},
		{"zero time bits", with(func(l *Layout) { l.TimeBits, l.GroupBits = 0, 51 }), ErrInvalidLayout, "time field has 0 bits"},
		{"zero seq bits", with(func(l *Layout) { l.SeqBits, l.GroupBits = 0, 22 }), ErrInvalidLayout, "sequence field has 0 bits"},
		{"huge width", with(func(l *Layout) { l.GroupBits = 100 }), ErrInvalidLayout, "wider than 64 bits"},
		{"unit 0", with(func(l *Layout) { l.UnitMs = 0 }), ErrInvalidLayout, "unit 0 ms"},
		{"negative unit", with(func(l *Layout) { l.UnitMs = -10 }), ErrInvalidLayout, "unit -10 ms"},
		{"time overflows int64 ms", with(func(l *Layout) { l.TimeBits, l.GroupBits, l.SeqBits, l.UnitMs = 62, 0, 1, 10 }), ErrInvalidLayout, "overflows int64"},
		{"epoch in the future", with(func(l *Layout) { l.EpochMs = validationNow.Add(time.Hour).UnixMilli() }), ErrEpochInFuture, "epoch 2026-01-01T01:00:00Z is after now"},
		{"bad order", with(func(l *Layout) { l.Order = "group-time-seq" }), ErrInvalidLayout, `order "group-time-seq"`},
		{"empty order", with(func(l *Layout) { l.Order = "" }), ErrInvalidLayout, `order ""`},
		{"empty name", with(func(l *Layout) { l.Name = "" }), ErrInvalidLayout, "name is empty"},
		{"zero value", Layout{}, ErrInvalidLayout, "name is empty"},
	}
	for _, tt := range layouts {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.l.Validate(validationNow)
			checkErr(t, err, tt.want, tt.message)
			if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("layout %q", tt.l.String())) {
				t.Errorf("error %q does not name the layout %q", err, tt.l.String())
			}
		})
	}
	if err := with(func(l *Layout) { l.EpochMs = validationNow.UnixMilli() }).Validate(validationNow); err != nil {
		t.Errorf("epoch equal to now: %v", err)
	}
	if err := with(func(l *Layout) { l.EpochMs = validationNow.Add(time.Hour).UnixMilli() }).Validate(validationNow); !errors.Is(err, ErrInvalidLayout) {
		t.Errorf("epoch in the future: %v does not also wrap ErrInvalidLayout", err)
	}

	specs := []struct {
		spec    string
		want    error
		message string
	}{
		{"custom:epoch=1704067200000,unit=1,bits=41/10/13", ErrInvalidLayout, `layout "custom:epoch=1704067200000,unit=1,bits=41/10/13": widths 41+10+13 = 64, want 63`},
		{"custom:epoch=4102444800000,unit=1,bits=41/10/12", ErrEpochInFuture, "epoch 2100-01-01T00:00:00Z is after now"},
		{"custom:epoch=1704067200000,unit=0,bits=41/10/12", ErrInvalidLayout, "unit 0 ms"},
		{"custom:epoch=1704067200000,unit=1,bits=41/10/12,order=seq-first", ErrInvalidLayout, `order "seq-first"`},
		{"Default", ErrUnknownPreset, `"Default"`},
		{"snowflake", ErrUnknownPreset, `"snowflake"`},
		{"", ErrUnknownPreset, `""`},
		{"custom", ErrUnknownPreset, `"custom"`},
		{"custom:", ErrMalformedSpec, `item "" is not key=value`},
		{"custom:epoch=1,unit=1", ErrMalformedSpec, "missing bits="},
		{"custom:unit=1,bits=41/10/12", ErrMalformedSpec, "missing epoch="},
		{"custom:epoch=1,bits=41/10/12", ErrMalformedSpec, "missing unit="},
		{"custom:epoch=yesterday,unit=1,bits=41/10/12", ErrMalformedSpec, `epoch "yesterday"`},
		{"custom:epoch=1,unit=1ms,bits=41/10/12", ErrMalformedSpec, `unit "1ms"`},
		{"custom:epoch=1,unit=1,bits=41/22", ErrMalformedSpec, `bits "41/22"`},
		{"custom:epoch=1,unit=1,bits=41/10/-1", ErrMalformedSpec, `width "-1"`},
		{"custom:epoch=1,unit=1,bits=41/10/300", ErrMalformedSpec, `width "300"`},
		{"custom:epoch=1,unit=1,bits=41/10/12,epoch=2", ErrMalformedSpec, `key "epoch" given twice`},
		{"custom:epoch=1,unit=1,bits=41/10/12,zone=utc", ErrMalformedSpec, `unknown key "zone"`},
		{"custom:epoch=1,,unit=1,bits=41/10/12", ErrMalformedSpec, `item ""`},
		{"custom:epoch 1,unit=1,bits=41/10/12", ErrMalformedSpec, `item "epoch 1"`},
	}
	for _, tt := range specs {
		t.Run("Parse "+tt.spec, func(t *testing.T) {
			l, err := Parse(tt.spec)
			checkErr(t, err, tt.want, tt.message)
			if l != (Layout{}) {
				t.Errorf("Parse(%q) returned %+v alongside an error", tt.spec, l)
			}
		})
	}
}

// checkErr fails t unless err wraps want and its message contains message.
func checkErr(t *testing.T, err, want error, message string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want %v", err, want)
	}
	if !strings.Contains(err.Error(), message) {
		t.Errorf("error %q does not mention %q", err, message)
	}
}

// TestOrderProperty checks, for random ticks t1 < t2 and a fixed group,
// that ID(t1) < ID(t2) and that Tick and Decode undo ID, for every preset.
// The seed is fixed so a failure reproduces.
func TestOrderProperty(t *testing.T) {
	const rounds = 2000
	for _, name := range presetNameList {
		t.Run(name, func(t *testing.T) {
			l := MustPreset(name)
			r := rand.New(rand.NewPCG(1, uint64(len(name))))
			maxGroup := uint64(1)<<l.GroupBits - 1
			for range rounds {
				group := r.Uint64N(maxGroup + 1)
				t1 := r.Uint64N(l.MaxTick()) // leaves room for t2 > t1
				var t2 uint64
				switch r.IntN(3) {
				case 0:
					t2 = t1 + 1 // neighbours, often across a unit boundary
				case 1:
					t2 = t1 + 1 + r.Uint64N(uint64(1)<<l.SeqBits) // same or next unit
				default:
					t2 = t1 + 1 + r.Uint64N(l.MaxTick()-t1) // anywhere above
				}
				id1, id2 := l.ID(t1, group), l.ID(t2, group)
				if id1 >= id2 {
					t.Fatalf("group %d: ID(%d) = %d is not below ID(%d) = %d", group, t1, id1, t2, id2)
				}
				for _, c := range []struct{ tick, id uint64 }{{t1, id1}, {t2, id2}} {
					if got := l.Tick(c.id); got != c.tick {
						t.Fatalf("Tick(ID(%d, %d)) = %d", c.tick, group, got)
					}
					if p := l.Decode(c.id); p.Tick != c.tick || p.Group != group || p.Seq != c.tick&(uint64(1)<<l.SeqBits-1) {
						t.Fatalf("Decode(ID(%d, %d)) = %+v", c.tick, group, p)
					}
				}
			}
		})
	}
}

func ExampleLayout_Decode() {
	l, _ := Preset("discord")
	p := l.Decode(175928847299117063)
	fmt.Println(p.Time.Format(time.RFC3339Nano), p.Group>>5, p.Group&31, p.Seq)
	// Output: 2016-04-30T11:18:25.796Z 1 0 7
}

func ExampleParse() {
	l, err := Parse("custom:epoch=1704067200000,unit=10,bits=39/16/8,order=time-seq-group")
	if err != nil {
		fmt.Println(err)
		return
	}
	tick := l.TickAt(time.Date(2024, 1, 1, 0, 0, 1, 0, time.UTC)) // 100 units in
	fmt.Println(l, tick>>l.SeqBits, l.ID(tick, 7) == 100<<24|7)
	// Output: custom:epoch=1704067200000,unit=10,bits=39/16/8,order=time-seq-group 100 true
}

var sink uint64

func BenchmarkID(b *testing.B) {
	for _, name := range []string{"default", "sonyflake"} {
		b.Run(name, func(b *testing.B) {
			l := MustPreset(name)
			tick := l.TickAt(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC))
			b.ReportAllocs()
			for b.Loop() {
				sink = l.ID(tick, 3)
				tick++
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	l := MustPreset("default")
	id := l.ID(l.TickAt(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)), 3)
	b.ReportAllocs()
	for b.Loop() {
		sink = l.Decode(id).Tick
		id++
	}
}
