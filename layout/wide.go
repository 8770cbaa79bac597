package layout

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
)

// Format names the standard a 128-bit layout renders its IDs in.
type Format string

const (
	// FormatUUIDv7 renders RFC 9562 UUIDv7: unix_ts_ms, version 7, the
	// counter in rand_a and the leftmost bits of rand_b (§6.2 method 1),
	// variant 10, then the group and random bits.
	FormatUUIDv7 Format = "uuidv7"

	// FormatULID renders ULIDs: 48-bit Unix milliseconds, then the
	// counter, the group and random bits in the 80 the spec calls
	// randomness; canonical text is 26 characters of Crockford base32.
	FormatULID Format = "ulid"
)

// Field widths of the 128-bit layouts. Both standards fix the time field
// at 48 bits of Unix milliseconds; the rest is Ordo's choice:
//
//   - The counter has 15 bits, 32,768 IDs per millisecond (8 times the
//     default layout's 4,096, and well above the 12.3 M IDs/s batched
//     clients reached). It keeps the tick (ms<<15 | counter) at 63 bits,
//     as wide as every 64-bit layout's, so MaxTick()+1, the sentinel
//     through which TickAt, TicksIn and the sequencer see a full time
//     field, still fits in a uint64, and a tick fits any signed 64-bit
//     store. With 16 bits the tick would fill all 64 and that sentinel
//     would wrap to 0.
//   - The group has 10 bits, as the default, twitter and discord layouts
//     have, so a cluster keeps its group number when it moves to a
//     128-bit layout; with the counter it makes every ID of every
//     cluster distinct before a single random bit.
//   - Every other bit is random, from crypto/rand: 49 in a UUIDv7 (RFC
//     9562 §6.2 warns that a counter alone makes IDs guessable), 55 in a
//     ULID.
const (
	wideTimeBits  = 48
	wideSeqBits   = 15
	wideGroupBits = 10

	// uuidRandABits of the counter fill rand_a; the other uuidSeqLowBits
	// are the leftmost of rand_b, right after the variant.
	uuidRandABits  = 12
	uuidSeqLowBits = wideSeqBits - uuidRandABits
	// uuidRandomBits is what rand_b (62 bits) keeps for randomness.
	uuidRandomBits = 62 - uuidSeqLowBits - wideGroupBits
	uuidVersion    = 7
	uuidVariant    = 0b10

	// ulidTickShift places the 63-bit tick at the top of the first 64
	// bits; the group's top bits fill what is left of them.
	ulidTickShift  = 64 - wideTimeBits - wideSeqBits
	ulidRandomBits = 80 - wideSeqBits - wideGroupBits
)

// Wide reports whether l makes 128-bit IDs (uuidv7, ulid): Render,
// RenderAll and DecodeWide serve it, and ID, Tick and Decode do not.
func (l Layout) Wide() bool { return l.Format != "" }

// Render packs tick, group and random bits into a 128-bit ID of l's
// format, big-endian, so that IDs compare as bytes exactly as their ticks
// do (the random bits sit below everything else). Like ID it neither
// checks nor allocates: l must be Wide, tick at most MaxTick and group
// through CheckGroup; only the low bits of random that the format keeps
// are used. A 64-bit layout gives the zero ID.
func (l Layout) Render(tick, group, random uint64) [16]byte {
	var hi, lo uint64
	switch l.Format {
	case FormatUUIDv7:
		ms, seq := tick>>wideSeqBits, tick&(1<<wideSeqBits-1)
		hi = ms<<16 | uuidVersion<<12 | seq>>uuidSeqLowBits
		lo = uuidVariant<<62 | (seq&(1<<uuidSeqLowBits-1))<<(62-uuidSeqLowBits) |
			group<<uuidRandomBits | random&(1<<uuidRandomBits-1)
	case FormatULID:
		hi = tick<<ulidTickShift | group>>(wideGroupBits-ulidTickShift)
		lo = group<<ulidRandomBits | random&(1<<ulidRandomBits-1)
	default:
		return [16]byte{}
	}
	var id [16]byte
	binary.BigEndian.PutUint64(id[:8], hi)
	binary.BigEndian.PutUint64(id[8:], lo)
	return id
}

// RenderAll renders ticks with group, as Render does, into IDs of type T
// (UUID for uuidv7, ULID for ulid), with random bits read from crypto/rand
// in one call for the whole batch. Ticks usually come from a server, so
// unlike Render it checks them: a tick above MaxTick would wrap the time
// field and sort below the IDs before it, so it fails the whole batch
// with ErrTickRange. A group past the layout's field would spill into the
// counter (and a UUID's variant bits), so it fails with CheckGroup's
// error. (crypto/rand does not fail on a supported system; Go
// ends the program if it ever does.)
func RenderAll[T ~[16]byte](l Layout, ticks []uint64, group uint64) ([]T, error) {
	if err := l.CheckGroup(group); err != nil {
		return nil, err
	}
	for _, tick := range ticks {
		if tick > l.MaxTick() {
			return nil, fmt.Errorf("tick %d is above layout %s's last, %d: %w", tick, l.String(), l.MaxTick(), ErrTickRange)
		}
	}
	random := make([]byte, 8*len(ticks))
	rand.Read(random)
	ids := make([]T, len(ticks))
	for i, tick := range ticks {
		ids[i] = T(l.Render(tick, group, binary.LittleEndian.Uint64(random[8*i:])))
	}
	return ids, nil
}

// DecodeWide takes a 128-bit ID of l's format apart: any UUIDv7 (or any
// ULID) decodes, also one Ordo did not make, though only in Ordo's own is
// the counter a counter and the group a group (in others they are random
// bits). It returns ErrNotUUIDv7 for a UUID of another version or variant
// under the uuidv7 layout, and ErrWrongWidth for a 64-bit layout.
func (l Layout) DecodeWide(id [16]byte) (Parts, error) {
	hi, lo := binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:])
	switch l.Format {
	case FormatUUIDv7:
		if v := hi >> 12 & 0xf; v != uuidVersion {
			return Parts{}, fmt.Errorf("UUID %s has version %d, want 7: %w", UUID(id), v, ErrNotUUIDv7)
		}
		if lo>>62 != uuidVariant {
			return Parts{}, fmt.Errorf("UUID %s has variant bits %02b, want RFC 9562's 10: %w", UUID(id), lo>>62, ErrNotUUIDv7)
		}
		seq := (hi&(1<<uuidRandABits-1))<<uuidSeqLowBits | lo>>(62-uuidSeqLowBits)&(1<<uuidSeqLowBits-1)
		tick := hi>>16<<wideSeqBits | seq
		return l.TickParts(tick, lo>>uuidRandomBits&(1<<wideGroupBits-1)), nil
	case FormatULID:
		group := (hi&(1<<ulidTickShift-1))<<(wideGroupBits-ulidTickShift) | lo>>ulidRandomBits
		return l.TickParts(hi>>ulidTickShift, group), nil
	}
	return Parts{}, fmt.Errorf("layout %q makes 64-bit IDs, not 128-bit ones: %w", l.String(), ErrWrongWidth)
}

// ParseWide reads the canonical text of an ID of l's format (any case; a
// UUID also without hyphens) and checks it as DecodeWide does.
func (l Layout) ParseWide(s string) ([16]byte, error) {
	var (
		id  [16]byte
		err error
	)
	switch l.Format {
	case FormatUUIDv7:
		var u UUID
		u, err = ParseUUID(s)
		id = u
	case FormatULID:
		var u ULID
		u, err = ParseULID(s)
		id = u
	}
	if err != nil {
		return [16]byte{}, err
	}
	if _, err := l.DecodeWide(id); err != nil {
		return [16]byte{}, err
	}
	return id, nil
}

// FormatWide returns the canonical text of a 128-bit ID of l's format:
// UUID.String or ULID.String. Both sort as text exactly as the IDs do as
// bytes. A 64-bit layout gives "".
func (l Layout) FormatWide(id [16]byte) string {
	switch l.Format {
	case FormatUUIDv7:
		return UUID(id).String()
	case FormatULID:
		return ULID(id).String()
	}
	return ""
}

// UUID is a 128-bit ID in RFC 9562's byte order. Being a plain [16]byte,
// it converts directly to and from [16]byte and to and from any other
// UUID type defined that way, github.com/google/uuid's UUID among them:
// uuid.UUID(id), layout.UUID(u).
type UUID [16]byte

// String returns the canonical text: 36 characters, lower-case hex in
// groups of 8-4-4-4-12, as PostgreSQL prints its uuid type.
func (u UUID) String() string {
	const hexDigits = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hexDigits[c>>4], hexDigits[c&0xf]
		j += 2
	}
	return string(b[:])
}

// MarshalText returns String's canonical text, so that encoding/json and
// the like write a UUID as text, not as 16 numbers.
func (u UUID) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalText reads what ParseUUID reads.
func (u *UUID) UnmarshalText(text []byte) error { return unmarshalText(u, ParseUUID, text) }

// ParseUUID reads a UUID of any version from its 36-character text, or
// the 32 hex digits without hyphens, in either case. Layout.ParseWide
// also checks that it is a UUIDv7.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	switch len(s) {
	case 36:
		for _, at := range [...]int{8, 13, 18, 23} {
			if s[at] != '-' {
				return UUID{}, fmt.Errorf("UUID %s: character %d is %q, want '-': %w", quote(s), at+1, s[at], ErrMalformedID)
			}
		}
		s = s[:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	case 32:
	default:
		return UUID{}, fmt.Errorf("UUID %s has %d characters, want 36 (or 32 hex digits): %w", quote(s), len(s), ErrMalformedID)
	}
	for i := range u {
		hi, okHi := hexValue(s[2*i])
		lo, okLo := hexValue(s[2*i+1])
		if !okHi || !okLo {
			return UUID{}, fmt.Errorf("UUID %s: %q is not a hex digit pair: %w", quote(s), s[2*i:2*i+2], ErrMalformedID)
		}
		u[i] = hi<<4 | lo
	}
	return u, nil
}

// hexValue is the value of one hex digit of either case.
func hexValue(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// ULID is a 128-bit ID in the ULID spec's byte order (most significant
// byte first). It converts directly to and from [16]byte, and to and from
// any other ULID type defined as one (github.com/oklog/ulid's among them).
type ULID [16]byte

// crockford is the ULID spec's alphabet: Crockford's base32, which leaves
// out I, L, O and U. Its symbols rise in ASCII order, so text sorts as the
// numbers do.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// ulidLen is the length of a ULID's canonical text: 26 characters of 5
// bits hold 130 bits, so the first character is at most '7'.
const ulidLen = 26

// crockfordValue maps a byte to its symbol's value, or 0xff for a byte
// outside the alphabet; lower case reads as upper case (the spec calls
// ULIDs case-insensitive).
var crockfordValue = func() [256]byte {
	var t [256]byte
	for i := range t {
		t[i] = 0xff
	}
	for v, c := range []byte(crockford) {
		t[c] = byte(v)
		if 'A' <= c && c <= 'Z' {
			t[c+'a'-'A'] = byte(v)
		}
	}
	return t
}()

// String returns the canonical text: 26 upper-case characters of
// Crockford base32.
func (u ULID) String() string {
	hi, lo := binary.BigEndian.Uint64(u[:8]), binary.BigEndian.Uint64(u[8:])
	var b [ulidLen]byte
	for i := ulidLen - 1; i >= 0; i-- {
		b[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(b[:])
}

// MarshalText returns String's canonical text, so that encoding/json and
// the like write a ULID as text, not as 16 numbers.
func (u ULID) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalText reads what ParseULID reads.
func (u *ULID) UnmarshalText(text []byte) error { return unmarshalText(u, ParseULID, text) }

// ParseULID reads a ULID from its 26 characters of Crockford base32 in
// either case. A character outside the alphabet (I, L, O and U included)
// is ErrMalformedID; a first character above 7, which would need more
// than 128 bits, is ErrULIDOverflow.
func ParseULID(s string) (ULID, error) {
	if len(s) != ulidLen {
		return ULID{}, fmt.Errorf("ULID %s has %d characters, want %d: %w", quote(s), len(s), ulidLen, ErrMalformedID)
	}
	var hi, lo uint64
	for i := range len(s) {
		v := crockfordValue[s[i]]
		if v == 0xff {
			return ULID{}, fmt.Errorf("ULID %s: character %d, %q, is not Crockford base32 (%s): %w", quote(s), i+1, s[i], crockford, ErrMalformedID)
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(v)
	}
	if crockfordValue[s[0]] > 7 {
		return ULID{}, fmt.Errorf("ULID %s starts with %q: more than 128 bits (the largest ULID is 7ZZZZZZZZZZZZZZZZZZZZZZZZZ): %w", quote(s), s[0], ErrULIDOverflow)
	}
	var u ULID
	binary.BigEndian.PutUint64(u[:8], hi)
	binary.BigEndian.PutUint64(u[8:], lo)
	return u, nil
}

// unmarshalText sets *dst to what parse reads from text, leaving it as it
// was on an error: UUID's and ULID's UnmarshalText.
func unmarshalText[T any](dst *T, parse func(string) (T, error), text []byte) error {
	v, err := parse(string(text))
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

// quote quotes text for an error message, cut short when long, so that a
// bad argument cannot flood a log.
func quote(s string) string {
	const most = 48
	if len(s) > most {
		return fmt.Sprintf("%q...", s[:most])
	}
	return fmt.Sprintf("%q", s)
}
