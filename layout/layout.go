// Package layout describes how Ordo packs a 64-bit snowflake-format ID and
// converts between IDs, ticks and wall-clock time.
//
// An ID holds three fields: a time field (whole time units since a custom
// epoch), a group field (the worker, shard or machine the ID belongs to) and
// a sequence field (a counter inside one time unit). The time field always
// takes the top bits, so IDs sort by time first. Two field orders exist
// below it: "time-group-seq" (Twitter, Discord, Instagram and Ordo's default)
// and "time-seq-group" (Sonyflake, whose machine ID sits in the low bits).
//
// A tick is time<<SeqBits | seq: one dense counter that never touches the
// group bits. The sequencer replicates only the last tick it handed out and
// computes the next one as max(last+1, TickAt(now)); incrementing a tick
// past the largest sequence value carries into the time field by itself, so
// a burst borrows from the future instead of stalling. For a fixed group,
// IDs sort exactly like ticks in both field orders, which is what lets Ordo
// promise strictly increasing IDs.
//
// Two 128-bit layouts, "uuidv7" (RFC 9562) and "ulid", keep the same tick
// (Unix milliseconds, then a counter) and render it with the group and
// random bits into 16 bytes that sort like the ticks: see wide.go.
//
// The package is pure computation: no I/O, no clocks except the "now" that
// callers pass to Validate (and the one Parse reads), and no randomness
// except crypto/rand's in RenderAll. ID, Tick, Decode and Render do not
// allocate.
package layout

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors. Every error this package returns wraps one of them (an
// epoch in the future wraps both ErrInvalidLayout and ErrEpochInFuture), so
// callers can branch with errors.Is while the message names the bad value.
var (
	// ErrInvalidLayout reports a layout that fails Validate: bad widths,
	// order, unit, name or epoch.
	ErrInvalidLayout = errors.New("invalid ID layout")

	// ErrEpochInFuture reports a layout whose epoch lies after the time it
	// was validated against. It is kept apart from the other validation
	// failures because it usually points at a wrong clock, not a typo.
	ErrEpochInFuture = errors.New("epoch is in the future")

	// ErrUnknownPreset reports a preset name that Preset does not know.
	ErrUnknownPreset = errors.New("unknown layout preset")

	// ErrMalformedSpec reports a "custom:" spec that Parse cannot read.
	ErrMalformedSpec = errors.New("malformed layout spec")

	// ErrGroupTooLarge reports a group number that does not fit the
	// layout's group field.
	ErrGroupTooLarge = errors.New("group does not fit the group field")

	// ErrMalformedID reports 128-bit ID text that is not a UUID or a ULID
	// at all: the wrong length, a misplaced hyphen, a character outside
	// the alphabet.
	ErrMalformedID = errors.New("malformed 128-bit ID")

	// ErrNotUUIDv7 reports a well-formed UUID whose version is not 7 or
	// whose variant is not RFC 9562's: its first 48 bits are not a Unix
	// millisecond time, so decoding it as one would print nonsense.
	ErrNotUUIDv7 = errors.New("not a UUIDv7")

	// ErrULIDOverflow reports 26 characters of Crockford base32 that hold
	// more than 128 bits (a first character above 7), which the ULID spec
	// says every implementation must refuse.
	ErrULIDOverflow = errors.New("ULID overflows 128 bits")

	// ErrWrongWidth reports a 64-bit operation asked of a 128-bit layout,
	// or a 128-bit one asked of a 64-bit layout.
	ErrWrongWidth = errors.New("wrong ID width for the layout")

	// ErrTickRange reports a tick above MaxTick given to RenderAll: its
	// time would not fit the 48-bit field and would wrap to an ID that
	// sorts below the ones before it.
	ErrTickRange = errors.New("tick beyond the layout's last")
)

// Order says how the group and sequence fields sit below the time field.
type Order string

const (
	// OrderTimeGroupSeq puts the group above the sequence, as Twitter,
	// Discord and Instagram do. It is the default order.
	OrderTimeGroupSeq Order = "time-group-seq"

	// OrderTimeSeqGroup puts the sequence above the group, as Sonyflake
	// does with its machine ID in the low bits.
	OrderTimeSeqGroup Order = "time-seq-group"
)

// customName is the Name that Parse gives a layout read from a "custom:"
// spec, and customPrefix starts such a spec.
const (
	customName   = "custom"
	customPrefix = customName + ":"
)

// Layout is the bit layout of an ID. The zero value is not valid; obtain
// one from Preset or Parse, or fill every field and call Validate. The JSON
// tags exist because the layout is stored alongside replicated state, where
// a node must refuse to serve IDs under a layout other than the one the
// cluster started with.
type Layout struct {
	Name      string `json:"name"`       // preset name, or "custom"
	EpochMs   int64  `json:"epoch_ms"`   // Unix milliseconds of time 0
	UnitMs    int64  `json:"unit_ms"`    // length of one time unit in ms (1, or 10 for sonyflake)
	TimeBits  uint   `json:"time_bits"`  // width of the time field, always the top field
	GroupBits uint   `json:"group_bits"` // width of the group field (may be 0)
	SeqBits   uint   `json:"seq_bits"`   // width of the sequence field
	Order     Order  `json:"order"`      // order of the group and sequence fields
	// Format is "" for a 64-bit snowflake layout, or the 128-bit standard
	// the IDs are rendered in (see Wide). Omitted from JSON when empty, so
	// the state of every cluster made before 128-bit layouts existed reads
	// back as the same layout.
	Format Format `json:"format,omitempty"`
}

// presets holds the named layouts. It is unexported so that nothing can
// alter a preset behind Preset's back; Preset hands out copies.
var presets = map[string]Layout{
	// Ordo's own default: Twitter's widths with a recent epoch, so the
	// 41-bit millisecond field lasts until about 2093.
	"default": {Name: "default", EpochMs: 1704067200000, UnitMs: 1, TimeBits: 41, GroupBits: 10, SeqBits: 12, Order: OrderTimeGroupSeq},
	// Twitter's snowflake: epoch 2010-11-04T01:42:54.657Z, 5-bit datacenter
	// plus 5-bit worker as the group.
	"twitter": {Name: "twitter", EpochMs: 1288834974657, UnitMs: 1, TimeBits: 41, GroupBits: 10, SeqBits: 12, Order: OrderTimeGroupSeq},
	// Discord documents a 42-bit timestamp above bit 22, so its widths sum
	// to 64 and the time field owns the sign bit (set from 2084 on).
	"discord": {Name: "discord", EpochMs: 1420070400000, UnitMs: 1, TimeBits: 42, GroupBits: 10, SeqBits: 12, Order: OrderTimeGroupSeq},
	// Instagram's PL/pgSQL shifts the time by 23 bits and keeps 13 shard
	// bits and 10 sequence bits; the widths sum to 64 as published.
	"instagram": {Name: "instagram", EpochMs: 1314220021721, UnitMs: 1, TimeBits: 41, GroupBits: 13, SeqBits: 10, Order: OrderTimeGroupSeq},
	// Sonyflake: 10 ms units since 2014-09-01T00:00:00Z, then an 8-bit
	// sequence, then a 16-bit machine ID in the low bits.
	"sonyflake": {Name: "sonyflake", EpochMs: 1409529600000, UnitMs: 10, TimeBits: 39, GroupBits: 16, SeqBits: 8, Order: OrderTimeSeqGroup},
	// The 128-bit layouts (wide.go): Unix milliseconds, as both standards
	// define the time field, then the counter, then the group, then random
	// bits; the widths are fixed by wideSeqBits and wideGroupBits.
	"uuidv7": {Name: "uuidv7", EpochMs: 0, UnitMs: 1, TimeBits: wideTimeBits, GroupBits: wideGroupBits, SeqBits: wideSeqBits, Order: OrderTimeSeqGroup, Format: FormatUUIDv7},
	"ulid":   {Name: "ulid", EpochMs: 0, UnitMs: 1, TimeBits: wideTimeBits, GroupBits: wideGroupBits, SeqBits: wideSeqBits, Order: OrderTimeSeqGroup, Format: FormatULID},
}

// presetNames lists the preset names in the order error messages show them.
const presetNames = "default, discord, instagram, sonyflake, twitter, uuidv7, ulid"

// Preset returns the named preset layout: "default", "twitter", "discord",
// "instagram", "sonyflake", or one of the 128-bit "uuidv7" and "ulid". Names are case-sensitive because the name is
// also the canonical spec that String produces.
func Preset(name string) (Layout, error) {
	l, ok := presets[name]
	if !ok {
		return Layout{}, fmt.Errorf("layout preset %q (want one of %s): %w", name, presetNames, ErrUnknownPreset)
	}
	return l, nil
}

// MustPreset is like Preset but panics when name is not a preset. It is
// for names fixed in the code, such as tests' and examples' (as
// regexp.MustCompile is for fixed patterns); a name that comes from an
// operator or a request goes through Preset or Parse, whose error says
// what is wrong.
func MustPreset(name string) Layout {
	l, err := Preset(name)
	if err != nil {
		panic(err)
	}
	return l
}

// Parse reads a layout spec: either a preset name, or
// "custom:epoch=<unix ms>,unit=<ms>,bits=<time>/<group>/<seq>" with an
// optional ",order=time-seq-group" (keys in any order). The result is
// checked with Validate against the current time, so a spec that parses is
// ready to use. Surrounding white space is ignored because specs often come
// from files and environment variables.
func Parse(spec string) (Layout, error) {
	spec = strings.TrimSpace(spec)
	var (
		l   Layout
		err error
	)
	if body, ok := strings.CutPrefix(spec, customPrefix); ok {
		l, err = parseCustom(spec, body)
	} else {
		l, err = Preset(spec)
	}
	if err != nil {
		return Layout{}, err
	}
	if err := l.Validate(time.Now()); err != nil {
		return Layout{}, err
	}
	return l, nil
}

// parseCustom reads the body of a "custom:" spec. It only checks syntax;
// Parse runs Validate afterwards so that semantic errors read the same
// whether a layout came from a spec or was built in code.
func parseCustom(spec, body string) (Layout, error) {
	malformed := func(format string, args ...any) error {
		return fmt.Errorf("layout spec %q: %s: %w", spec, fmt.Sprintf(format, args...), ErrMalformedSpec)
	}
	l := Layout{Name: customName, Order: OrderTimeGroupSeq}
	seen := make(map[string]bool, 4)
	for item := range strings.SplitSeq(body, ",") {
		key, value, ok := strings.Cut(item, "=")
		if !ok || key == "" {
			return Layout{}, malformed("item %q is not key=value", item)
		}
		if seen[key] {
			return Layout{}, malformed("key %q given twice", key)
		}
		seen[key] = true
		switch key {
		case "epoch":
			v, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return Layout{}, malformed("epoch %q is not an integer of Unix milliseconds", value)
			}
			l.EpochMs = v
		case "unit":
			v, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return Layout{}, malformed("unit %q is not an integer of milliseconds", value)
			}
			l.UnitMs = v
		case "bits":
			widths := strings.Split(value, "/")
			if len(widths) != 3 {
				return Layout{}, malformed("bits %q, want <time>/<group>/<seq>", value)
			}
			var w [3]uint
			for i, s := range widths {
				v, err := strconv.ParseUint(s, 10, 8)
				if err != nil {
					return Layout{}, malformed("bits %q: width %q is not a small non-negative integer", value, s)
				}
				w[i] = uint(v)
			}
			l.TimeBits, l.GroupBits, l.SeqBits = w[0], w[1], w[2]
		case "order":
			// Validate judges the value, so that an unknown order is
			// reported the same way for specs and hand-built layouts.
			l.Order = Order(value)
		default:
			return Layout{}, malformed("unknown key %q (want epoch, unit, bits, order)", key)
		}
	}
	for _, key := range []string{"epoch", "unit", "bits"} {
		if !seen[key] {
			return Layout{}, malformed("missing %s=", key)
		}
	}
	return l, nil
}

// String returns the canonical spec of l, which Parse turns back into l:
// the bare preset name for an unchanged preset, otherwise the "custom:"
// form. A changed preset prints in the custom form on purpose, so that an
// error message naming two layouts shows how they differ. Parse names the
// result "custom", so Name survives the round trip only for presets and
// layouts already named "custom".
func (l Layout) String() string {
	if l.isPreset() {
		return l.Name
	}
	s := fmt.Sprintf("%sepoch=%d,unit=%d,bits=%d/%d/%d", customPrefix, l.EpochMs, l.UnitMs, l.TimeBits, l.GroupBits, l.SeqBits)
	if l.Order != OrderTimeGroupSeq {
		s += ",order=" + string(l.Order)
	}
	return s
}

// isPreset reports whether l is exactly the preset its Name names.
func (l Layout) isPreset() bool {
	p, ok := presets[l.Name]
	return ok && p == l
}

// invalid builds a validation error that names the layout and the bad value.
func invalid(l Layout, format string, args ...any) error {
	return fmt.Errorf("layout %q: %s: %w", l.String(), fmt.Sprintf(format, args...), ErrInvalidLayout)
}

// Validate checks that l is usable at time now: a non-empty name, a known
// order, time and sequence fields of at least one bit, widths summing to 63
// (64 only for the unchanged discord and instagram presets, whose public
// definitions use the sign bit), a unit of at least 1 ms, a time range that
// fits int64 milliseconds, and an epoch not after now. Custom layouts must
// leave the sign bit clear so that IDs stay positive as int64 in every
// language and database that stores them. A 128-bit layout must be its
// preset unchanged: its standard fixes where every field sits.
func (l Layout) Validate(now time.Time) error {
	if l.Name == "" {
		return invalid(l, "name is empty")
	}
	if l.Format != "" && !l.isPreset() {
		return invalid(l, "format %q: a 128-bit layout must be the unchanged %q or %q preset", l.Format, FormatUUIDv7, FormatULID)
	}
	if l.Order != OrderTimeGroupSeq && l.Order != OrderTimeSeqGroup {
		return invalid(l, "order %q, want %q or %q", l.Order, OrderTimeGroupSeq, OrderTimeSeqGroup)
	}
	if l.TimeBits < 1 {
		return invalid(l, "time field has 0 bits, want at least 1")
	}
	if l.SeqBits < 1 {
		return invalid(l, "sequence field has 0 bits, want at least 1")
	}
	// Bound each width before adding them so the sum cannot wrap around.
	if l.TimeBits > 64 || l.GroupBits > 64 || l.SeqBits > 64 {
		return invalid(l, "widths %d/%d/%d: a field is wider than 64 bits", l.TimeBits, l.GroupBits, l.SeqBits)
	}
	// A 128-bit layout's group sits outside the tick (wide.go), so only
	// 64-bit layouts must fill 63 or 64 bits.
	if sum := l.TimeBits + l.GroupBits + l.SeqBits; !l.Wide() && sum != 63 && (sum != 64 || !l.isPreset()) {
		return invalid(l, "widths %d+%d+%d = %d, want 63", l.TimeBits, l.GroupBits, l.SeqBits, sum)
	}
	if l.UnitMs < 1 {
		return invalid(l, "unit %d ms, want at least 1", l.UnitMs)
	}
	// Decode adds the time field, in ms, to the epoch; refuse layouts whose
	// last unit would overflow int64 milliseconds rather than decode garbage.
	lastUnit := uint64(1)<<l.TimeBits - 1
	if lastUnit > math.MaxInt64/uint64(l.UnitMs) ||
		(l.EpochMs > 0 && int64(lastUnit)*l.UnitMs > math.MaxInt64-l.EpochMs) {
		return invalid(l, "%d-bit time field of %d ms units from epoch %d overflows int64 milliseconds", l.TimeBits, l.UnitMs, l.EpochMs)
	}
	if nowMs := now.UnixMilli(); l.EpochMs > nowMs {
		return fmt.Errorf("layout %q: epoch %s is after now %s: %w: %w", l.String(),
			formatMs(l.EpochMs), formatMs(nowMs), ErrInvalidLayout, ErrEpochInFuture)
	}
	return nil
}

// formatMs renders Unix milliseconds for error messages.
func formatMs(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

// CheckGroup reports whether group fits l's group field. The sequencer
// calls it once when a group is configured, which is what allows ID to skip
// the check on the hot path.
func (l Layout) CheckGroup(group uint64) error {
	if maxGroup := uint64(1)<<l.GroupBits - 1; group > maxGroup {
		return fmt.Errorf("group %d does not fit the %d-bit group field of layout %q (max %d): %w",
			group, l.GroupBits, l.String(), maxGroup, ErrGroupTooLarge)
	}
	return nil
}

// MaxTick returns the largest tick the time and sequence fields can hold:
// the last sequence number of the last time unit. A sequencer that would
// need a larger tick has run out of IDs for good.
func (l Layout) MaxTick() uint64 {
	// For a variable shift of 64, Go yields 0, so 0-1 still gives all ones.
	return uint64(1)<<(l.TimeBits+l.SeqBits) - 1
}

// TickAt returns the first tick of the time unit that contains t. A time
// before the epoch gives 0: callers take max(last+1, TickAt(now)), so a
// clock behind the epoch simply means "keep counting from last". A time
// beyond the last unit the time field can hold gives MaxTick()+1, so that
// callers see exhaustion instead of a wrapped-around small tick. l must be
// valid (UnitMs ≥ 1).
func (l Layout) TickAt(t time.Time) uint64 {
	// UnixMilli floors, so an instant just before the epoch stays negative.
	ms := t.UnixMilli() - l.EpochMs
	if ms < 0 {
		return 0
	}
	units := uint64(ms / l.UnitMs)
	if units > l.MaxTick()>>l.SeqBits {
		return l.MaxTick() + 1
	}
	return units << l.SeqBits
}

// TicksIn returns how many ticks span d: whole time units in d, shifted
// past the sequence field. Any positive d counts as at least one unit, so a
// sub-unit duration never rounds to "no time at all". Non-positive d gives
// 0, and a d longer than the time field gives MaxTick()+1, mirroring TickAt.
func (l Layout) TicksIn(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	units := uint64(d.Milliseconds() / l.UnitMs)
	if units == 0 {
		units = 1
	}
	if units > l.MaxTick()>>l.SeqBits {
		return l.MaxTick() + 1
	}
	return units << l.SeqBits
}

// ID packs tick and group into a 64-bit ID. It is the hot path, so it
// neither checks nor allocates: l must not be Wide (Render makes those
// IDs), tick must be at most MaxTick and group must have passed
// CheckGroup, or bits of one field spill into another.
func (l Layout) ID(tick, group uint64) uint64 {
	if l.Order == OrderTimeSeqGroup {
		// time<<(S+G) | seq<<G | group is just the tick above the group.
		return tick<<l.GroupBits | group
	}
	seq := tick & (uint64(1)<<l.SeqBits - 1)
	// tick^seq is time<<S; one more shift by G opens the gap for the group.
	return (tick^seq)<<l.GroupBits | group<<l.SeqBits | seq
}

// Tick returns the tick of id, undoing ID for any group. Like ID it does
// not check: under a Wide layout the result means nothing.
func (l Layout) Tick(id uint64) uint64 {
	if l.Order == OrderTimeSeqGroup {
		return id >> l.GroupBits
	}
	seqMask := uint64(1)<<l.SeqBits - 1
	return (id>>(l.GroupBits+l.SeqBits))<<l.SeqBits | id&seqMask
}

// Step returns the difference between the IDs of two consecutive ticks
// inside one time unit, for a fixed group: 1 for time-group-seq, and
// 1<<GroupBits for time-seq-group, where the group sits below the sequence.
// It lets a caller that reserved a run of ticks hand out the IDs by
// addition. Across a unit boundary the difference is larger in
// time-group-seq, though IDs still increase.
func (l Layout) Step() uint64 {
	if l.Order == OrderTimeSeqGroup {
		return uint64(1) << l.GroupBits
	}
	return 1
}

// Parts is an ID taken apart.
type Parts struct {
	Time  time.Time // start of the ID's time unit, in UTC
	Group uint64    // group field
	Seq   uint64    // sequence field
	Tick  uint64    // time<<SeqBits | seq
}

// Decode takes a 64-bit id apart (DecodeWide takes a 128-bit one). Time is
// the start of the ID's time unit in UTC; l must be valid, so that the time
// fits int64 milliseconds. It does not check the width, to stay as cheap
// as ID: under a Wide layout the result means nothing.
func (l Layout) Decode(id uint64) Parts {
	groupMask := uint64(1)<<l.GroupBits - 1
	group := id & groupMask
	if l.Order != OrderTimeSeqGroup {
		group = id >> l.SeqBits & groupMask
	}
	return l.TickParts(l.Tick(id), group)
}

// TickParts fills Parts from a tick and a group, for layouts of either
// width: what Decode or DecodeWide gives for the ID they make.
func (l Layout) TickParts(tick, group uint64) Parts {
	return Parts{Time: l.TickTime(tick), Group: group, Seq: tick & (uint64(1)<<l.SeqBits - 1), Tick: tick}
}

// TickTime returns the start, in UTC, of the time unit tick falls in, for
// layouts of either width. A tick above MaxTick is read as MaxTick (a
// high-water mark may sit one past the last tick handed out).
func (l Layout) TickTime(tick uint64) time.Time {
	units := min(tick, l.MaxTick()) >> l.SeqBits
	return time.UnixMilli(l.EpochMs + int64(units)*l.UnitMs).UTC()
}
