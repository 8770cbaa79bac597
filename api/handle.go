package api

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadHandle means a reservation handle was not one a node hands out.
var ErrBadHandle = errors.New("bad reservation handle")

// Handle names a tracked reservation: its first tick and how many ticks
// it holds. Ticks are never handed out twice, so the first one names the
// reservation for good, on every node and after every leader change. On
// the wire it is an opaque string ("r1." first "." count); clients pass
// it back as they got it.
type Handle struct {
	First, Count uint64
}

const handlePrefix = "r1."

// String is the handle as Reserve answers it.
func (h Handle) String() string {
	return handlePrefix + strconv.FormatUint(h.First, 10) + "." + strconv.FormatUint(h.Count, 10)
}

// ParseHandle reads a handle that String wrote.
func ParseHandle(s string) (Handle, error) {
	rest, ok := strings.CutPrefix(s, handlePrefix)
	first, count, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return Handle{}, fmt.Errorf("%w: %q: pass the handle exactly as Reserve answered it", ErrBadHandle, s)
	}
	var h Handle
	var err1, err2 error
	h.First, err1 = strconv.ParseUint(first, 10, 64)
	h.Count, err2 = strconv.ParseUint(count, 10, 64)
	if err1 != nil || err2 != nil || h.First == 0 || h.Count == 0 || h.First+h.Count < h.First {
		return Handle{}, fmt.Errorf("%w: %q: pass the handle exactly as Reserve answered it", ErrBadHandle, s)
	}
	return h, nil
}
