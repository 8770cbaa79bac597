package layout

import (
	"errors"
	"math"
	"testing"
	"time"
)

// endOfTime is "now" for layouts built by FuzzIDDecode: their epochs are
// arbitrary, and the fuzz target is about bit arithmetic, not clocks (the
// FSM validates replayed layouts against the same instant).
var endOfTime = time.UnixMilli(math.MaxInt64)

// sentinels are the errors every error of this package must wrap.
var sentinels = []error{ErrInvalidLayout, ErrEpochInFuture, ErrUnknownPreset, ErrMalformedSpec, ErrGroupTooLarge, ErrMalformedID, ErrNotUUIDv7, ErrULIDOverflow, ErrWrongWidth}

func wrapsSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// FuzzParse feeds arbitrary specs to Parse. Parse must not panic; what it
// refuses comes back as the zero Layout and an error wrapping a sentinel;
// what it accepts passes Validate, and its String is a canonical spec that
// parses back to the same layout and prints the same again. Specs arrive
// from flags, files and environment variables, so anything may show up.
func FuzzParse(f *testing.F) {
	for _, name := range presetNameList {
		f.Add(name)
	}
	for _, spec := range []string{
		"custom:epoch=1704067200000,unit=1,bits=41/10/12",
		"  custom:bits=40/7/16,order=time-seq-group,unit=4,epoch=1600000000000\n",
		"custom:epoch=0,unit=1,bits=41/0/22,order=time-group-seq",
		"custom:epoch=-9223372036854775808,unit=1,bits=1/0/62",
		"custom:epoch=+1,unit=+1,bits=41/10/12",
		"custom:epoch=1,unit=9223372036854775807,bits=1/61/1",
		"\tdefault\r\n",
		// Refused: every sentinel and every syntax error has a seed.
		"custom:epoch=1704067200000,unit=1,bits=41/10/13",
		"custom:epoch=4102444800000,unit=1,bits=41/10/12",
		"custom:epoch=1,unit=0,bits=41/10/12",
		"custom:epoch=1,unit=1,bits=41/10/12,order=seq-first",
		"custom:epoch=1,unit=1,bits=62/0/1,order=time-seq-group",
		"custom:epoch=1,unit=1,bits=64/0/0",
		"custom:epoch=1,unit=1,bits=255/255/255",
		"Default", "", "custom", "custom:", "custom:=",
		"custom:epoch=1,unit=1", "custom:epoch=1,unit=1,bits=41/22",
		"custom:epoch=1,unit=1,bits=41/10/12,epoch=2",
		"custom:epoch=1,unit=1,bits=41/10/12,zone=utc",
		"custom:epoch=1,,unit=1,bits=41/10/12",
		"custom:epoch=99999999999999999999,unit=1,bits=41/10/12",
		"custom:epoch=1,unit=1,bits=41/10/12\x00",
		"custom:epoch=1,unit=1,bits=41/10/12,order=",
		"custom:épοch=1,unit=1,bits=41/10/12",
	} {
		f.Add(spec)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		l, err := Parse(spec)
		if err != nil {
			if l != (Layout{}) {
				t.Fatalf("Parse(%q) returned %+v alongside error %v", spec, l, err)
			}
			if !wrapsSentinel(err) {
				t.Fatalf("Parse(%q) error %v wraps no sentinel", spec, err)
			}
			return
		}
		if err := l.Validate(time.Now()); err != nil {
			t.Fatalf("Parse(%q) accepted %+v, which fails Validate: %v", spec, l, err)
		}
		canonical := l.String()
		back, err := Parse(canonical)
		if err != nil {
			t.Fatalf("Parse(%q) = %+v, but its String %q does not parse: %v", spec, l, canonical, err)
		}
		if back != l {
			t.Fatalf("Parse(%q) = %+v, but Parse(String()) = %+v (via %q)", spec, l, back, canonical)
		}
		if again := back.String(); again != canonical {
			t.Fatalf("String() is not canonical: %q, then %q", canonical, again)
		}
	})
}

// FuzzIDDecode builds layouts from raw field values (a preset when preset
// is below the number of presets, otherwise a custom layout whose sequence
// field takes the bits the time and group fields leave of 63, so that most
// inputs are valid layouts), and for every layout Validate accepts checks
// that ID, Tick and Decode agree for a tick and group brought into range:
// Decode(ID(tick, group)) gives back tick, group, sequence and the unit's
// start time, TickAt of that time gives the unit's first tick, and the next
// tick's ID is larger. A layout Validate refuses must not get this far,
// which is what lets ID and Decode skip their checks on the hot path.
func FuzzIDDecode(f *testing.F) {
	for i := range presetNameList {
		f.Add(uint8(i), int64(0), int64(0), uint8(0), uint8(0), false, uint64(12345678901), uint64(3))
	}
	// Custom layouts at the edges: all ones, an epoch far in the past, a
	// single time bit, a single sequence bit, no group, the widest group,
	// the largest unit, both orders.
	f.Add(uint8(255), int64(1704067200000), int64(1), uint8(41), uint8(10), false, ^uint64(0), ^uint64(0))
	f.Add(uint8(255), int64(math.MinInt64), int64(1), uint8(41), uint8(10), false, ^uint64(0), uint64(1))
	f.Add(uint8(255), int64(0), int64(1), uint8(1), uint8(0), true, uint64(1)<<62, uint64(0))
	f.Add(uint8(255), int64(-1), int64(2), uint8(62), uint8(0), false, uint64(7), uint64(0))
	f.Add(uint8(255), int64(1409529600000), int64(10), uint8(39), uint8(16), true, uint64(1)<<40, uint64(65535))
	f.Add(uint8(255), int64(math.MaxInt64), int64(math.MaxInt64), uint8(1), uint8(61), true, uint64(3), uint64(5))
	// Refused by Validate: no sequence bits, no time bits, a zero unit, a
	// time field that overflows int64 milliseconds.
	f.Add(uint8(255), int64(0), int64(1), uint8(42), uint8(21), false, uint64(1), uint64(1))
	f.Add(uint8(255), int64(0), int64(1), uint8(0), uint8(10), false, uint64(1), uint64(1))
	f.Add(uint8(255), int64(0), int64(0), uint8(41), uint8(10), false, uint64(1), uint64(1))
	f.Add(uint8(255), int64(1), int64(1<<40), uint8(40), uint8(0), true, uint64(1), uint64(1))
	f.Fuzz(func(t *testing.T, preset uint8, epochMs, unitMs int64, timeBits, groupBits uint8, seqGroup bool, tick, group uint64) {
		// The widths must sum to 63, so two of them fix the third; a
		// negative remainder becomes 0, which Validate refuses.
		seqBits := max(63-int(timeBits)-int(groupBits), 0)
		l := Layout{Name: customName, EpochMs: epochMs, UnitMs: unitMs, TimeBits: uint(timeBits), GroupBits: uint(groupBits), SeqBits: uint(seqBits), Order: OrderTimeGroupSeq}
		if seqGroup {
			l.Order = OrderTimeSeqGroup
		}
		if int(preset) < len(presetNameList) {
			l = MustPreset(presetNameList[preset])
		}
		if err := l.Validate(endOfTime); err != nil {
			if !errors.Is(err, ErrInvalidLayout) {
				t.Fatalf("Validate(%+v) = %v, want ErrInvalidLayout", l, err)
			}
			return
		}
		if l.MaxTick() != math.MaxUint64 {
			tick %= l.MaxTick() + 1
		}
		maxGroup := uint64(1)<<l.GroupBits - 1
		if maxGroup != math.MaxUint64 {
			group %= maxGroup + 1
		}
		if err := l.CheckGroup(group); err != nil {
			t.Fatalf("%s: CheckGroup(%d) of a group in range: %v", l, group, err)
		}
		id := l.ID(tick, group)
		if got := l.Tick(id); got != tick {
			t.Fatalf("%s: Tick(ID(%d, %d) = %d) = %d", l, tick, group, id, got)
		}
		seq := tick & (uint64(1)<<l.SeqBits - 1)
		p := l.Decode(id)
		wantTime := time.UnixMilli(l.EpochMs + int64(tick>>l.SeqBits)*l.UnitMs).UTC()
		if p.Tick != tick || p.Group != group || p.Seq != seq || !p.Time.Equal(wantTime) {
			t.Fatalf("%s: Decode(ID(%d, %d) = %d) = %+v, want tick %d group %d seq %d time %s",
				l, tick, group, id, p, tick, group, seq, wantTime)
		}
		if got, want := l.TickAt(p.Time), tick^seq; got != want {
			t.Fatalf("%s: TickAt(%s), the start of tick %d's unit, = %d, want %d", l, p.Time, tick, got, want)
		}
		if tick < l.MaxTick() {
			if next := l.ID(tick+1, group); next <= id {
				t.Fatalf("%s: ID(%d, %d) = %d is not above ID(%d, %d) = %d", l, tick+1, group, next, tick, group, id)
			}
		}
	})
}
