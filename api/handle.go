package api

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadHandle means a reservation handle was not one a node hands out.
var ErrBadHandle = errors.New("bad reservation handle")

// Handle names a tracked reservation: its sequence, its first tick (a
// dense sequence's first value) and how many it holds. IDs are never
// handed out twice within a sequence, so the first one names the
// reservation for good, on every node and after every leader change. On
// the wire it is an opaque string, "r1." first "." count for the default
// sequence, "s1." sequence "." first "." count for a named one; clients
// pass it back as they got it.
type Handle struct {
	First, Count uint64
	// Seq is the named sequence; "" for the default sequence.
	Seq string
}

const (
	handlePrefix      = "r1."
	namedHandlePrefix = "s1."
)

// String is the handle as Reserve answers it.
func (h Handle) String() string {
	tail := strconv.FormatUint(h.First, 10) + "." + strconv.FormatUint(h.Count, 10)
	if h.Seq == "" {
		return handlePrefix + tail
	}
	return namedHandlePrefix + h.Seq + "." + tail
}

// ParseHandle reads a handle that String wrote.
func ParseHandle(s string) (Handle, error) {
	bad := fmt.Errorf("%w: %q: pass the handle exactly as Reserve answered it", ErrBadHandle, s)
	var h Handle
	rest, ok := strings.CutPrefix(s, handlePrefix)
	if !ok {
		// A named sequence's: its name may hold dots, the numbers do not.
		if rest, ok = strings.CutPrefix(s, namedHandlePrefix); !ok {
			return Handle{}, bad
		}
		i := strings.LastIndexByte(rest, '.')
		j := -1
		if i > 0 {
			j = strings.LastIndexByte(rest[:i], '.')
		}
		if j <= 0 || CheckSequenceName(rest[:j]) != nil {
			return Handle{}, bad
		}
		h.Seq, rest = rest[:j], rest[j+1:]
	}
	first, count, ok := strings.Cut(rest, ".")
	if !ok {
		return Handle{}, bad
	}
	var err1, err2 error
	h.First, err1 = strconv.ParseUint(first, 10, 64)
	h.Count, err2 = strconv.ParseUint(count, 10, 64)
	if err1 != nil || err2 != nil || h.First == 0 || h.Count == 0 || h.First+h.Count < h.First {
		return Handle{}, bad
	}
	return h, nil
}
