package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
)

var (
	errExpired   = errors.New("reservation expired: do not publish these IDs")
	errAbandoned = errors.New("reservation abandoned")
)

// fakeOrdo hands out IDs 1, 2, 3... and tracks reservations as Ordo does,
// with expiry decided by the test (Expire) rather than by a clock. Its W
// is the lowest ID of an open reservation (or the next ID when none is
// open) unless the test pins it with SetW: W never passes an open one.
type fakeOrdo struct {
	mu     sync.Mutex
	next   uint64
	open   map[string]uint64 // handle -> first ID, while open
	fate   map[string]string
	pinned bool
	w      uint64
}

func newFakeOrdo() *fakeOrdo {
	return &fakeOrdo{next: 1, open: map[string]uint64{}, fate: map[string]string{}}
}

func (o *fakeOrdo) Reserve(_ context.Context, count int, _ time.Duration) (Reservation, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := Reservation{Handle: fmt.Sprintf("h%d", o.next)}
	for range count {
		r.IDs = append(r.IDs, o.next)
		o.next++
	}
	o.open[r.Handle] = r.IDs[0]
	o.fate[r.Handle] = "open"
	return r, nil
}

// NextID is plain Next: settled as soon as it is handed out.
func (o *fakeOrdo) NextID() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.next++
	return o.next - 1
}

func (o *fakeOrdo) Complete(_ context.Context, h string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch o.fate[h] {
	case "open", "completed":
		delete(o.open, h)
		o.fate[h] = "completed"
		return nil
	case "expired":
		return errExpired
	case "abandoned":
		return errAbandoned
	}
	return fmt.Errorf("no reservation %s", h)
}

func (o *fakeOrdo) Abandon(_ context.Context, h string) (api.Fate, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch o.fate[h] {
	case "open":
		delete(o.open, h)
		o.fate[h] = "abandoned"
		return api.Fate_FATE_ABANDONED, nil
	case "abandoned", "expired":
		return api.Fate_FATE_ABANDONED, nil
	case "completed":
		return 0, errors.New("reservation completed")
	}
	return 0, fmt.Errorf("no reservation %s", h)
}

// Expire is the TTL running out: the reservation can never be completed.
func (o *fakeOrdo) Expire(h string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fate[h] == "open" {
		delete(o.open, h)
		o.fate[h] = "expired"
	}
}

func (o *fakeOrdo) Fate(h string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.fate[h]
}

// SetW pins W; the tests that pin it expire the reservations below it.
func (o *fakeOrdo) SetW(w uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pinned, o.w = true, w
}

func (o *fakeOrdo) Watermark(context.Context) (client.Mark, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pinned {
		return client.Mark{ID: o.w}, nil
	}
	w := o.next
	for _, first := range o.open {
		w = min(w, first)
	}
	o.w = max(o.w, w) // the client's floor
	return client.Mark{ID: o.w}, nil
}
