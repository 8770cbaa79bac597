//go:build unix

package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// outcome is what one append attempt left in the table.
type outcome struct {
	ids       []uint64
	committed bool
	raced     bool // stalled past its TTL and committed without waiting
}

// TestWritersAndReaderExactlyOnce: concurrent writers append, abandon,
// and stall past their TTL (some commit once the reader has fenced past
// them, some race it), while a reader tails by W, fails inside a batch
// once and is restarted. Every committed event is read exactly once, in
// ID order; every stalled writer's commit either failed or was read.
func TestWritersAndReaderExactlyOnce(t *testing.T) {
	f := newFixture(t)
	f.reader.Limit = 7
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const writers, appends = 4, 15
	outcomes := make(chan outcome, writers*appends)
	errs := make(chan error, writers)
	for w := range writers {
		go func() { errs <- writeMany(ctx, f, w*appends, appends, outcomes) }()
	}
	stop := make(chan struct{})
	readerDone := make(chan error, 1)
	go func() {
		err := tail(ctx, f, stop)
		if err != nil {
			cancel() // writers waiting for the fence would wait in vain
		}
		readerDone <- err
	}()
	for range writers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(stop)
	if err := <-readerDone; err != nil {
		t.Fatal(err)
	}
	// Even after a writer's error: what it committed must have been read.
	f.drain(t)
	close(outcomes)
	checkOutcomes(t, f, outcomes)
}

// writeMany runs n appends numbered from first; the number picks the
// writer's behaviour.
func writeMany(ctx context.Context, f *fixture, first, n int, outcomes chan<- outcome) error {
	for i := first; i < first+n; i++ {
		o, err := writeOne(ctx, f, i)
		if o.ids != nil {
			outcomes <- o
		}
		if err != nil {
			return fmt.Errorf("append %d: %w", i, err)
		}
	}
	return nil
}

// writeOne appends 1 to 3 events as append i: completed, abandoned, or
// stalled past its TTL.
func writeOne(ctx context.Context, f *fixture, i int) (outcome, error) {
	payloads := make([]string, 1+i%3)
	for j := range payloads {
		payloads[j] = fmt.Sprintf("%d.%d", i, j)
	}
	if i%6 < 3 {
		ids, err := f.writer.Append(ctx, payloads)
		return outcome{ids, err == nil, false}, err
	}
	p, err := f.writer.Begin(ctx, payloads)
	if err != nil {
		return outcome{}, err
	}
	ids := p.Reservation.IDs
	switch i % 6 {
	case 3: // gives up
		return outcome{ids, false, false}, p.Rollback(ctx)
	case 4: // stalls until a reader fenced past it, then commits
		f.ordo.Expire(p.Reservation.Handle)
		if err := awaitFence(ctx, f, ids[len(ids)-1]+1); err != nil {
			return outcome{}, errors.Join(err, p.Rollback(ctx))
		}
		err := p.Commit(ctx)
		if errors.Is(err, ErrFenced) {
			return outcome{ids, false, false}, nil
		}
		return outcome{ids, errors.Is(err, ErrCommitted), false}, fmt.Errorf("a commit below the fence answered %v, want ErrFenced", err)
	default: // stalls past its TTL and races the reader
		f.ordo.Expire(p.Reservation.Handle)
		err := p.Commit(ctx)
		if errors.Is(err, ErrFenced) {
			return outcome{ids, false, true}, nil
		}
		if !errors.Is(err, ErrCommitted) || !errors.Is(err, errExpired) {
			return outcome{}, fmt.Errorf("an expired writer's commit answered %v", err)
		}
		return outcome{ids, true, true}, nil
	}
}

// awaitFence waits until the fence reaches at least fence.
func awaitFence(ctx context.Context, f *fixture, fence uint64) error {
	for {
		var cur int64
		if err := f.db.QueryRow(ctx, "SELECT fence FROM event_fence").Scan(&cur); err != nil {
			return fmt.Errorf("waiting for the fence to reach %d: %w", fence, err)
		}
		if uint64(cur) >= fence {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the fence stays at %d, below %d: %w", cur, fence, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// tail reads by W until stop, failing inside one batch and restarting
// (a new Reader on the same checkpoint) once along the way.
func tail(ctx context.Context, f *fixture, stop <-chan struct{}) error {
	errCrash := errors.New("crash")
	crash := func(ctx context.Context, tx pgx.Tx, b Batch) error {
		if err := RecordReads(readerName)(ctx, tx, b); err != nil {
			return err
		}
		return errCrash
	}
	batches := 0
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		process := RecordReads(readerName)
		if batches == 5 {
			process = crash
		}
		b, err := f.reader.Next(ctx, process)
		switch {
		case errors.Is(err, errCrash):
			f.reader = &Reader{DB: f.db, Ordo: f.ordo, Name: readerName, Limit: 3, LockWait: time.Minute}
			batches++
			continue
		case err != nil:
			return fmt.Errorf("reader: %w", err)
		case len(b.Events) > 0:
			batches++
			continue
		}
		select { // caught up: pace the polling of W
		case <-stop:
			return nil
		case <-time.After(time.Millisecond):
		}
	}
}

// checkOutcomes: what committed is what each writer was told, and the
// reader read all of it once, in ID order.
func checkOutcomes(t *testing.T, f *fixture, outcomes <-chan outcome) {
	var want []uint64
	var refused, racedIn, racedOut int
	for o := range outcomes {
		switch {
		case o.raced && o.committed:
			racedIn++
		case o.raced:
			racedOut++
		case !o.committed:
			refused++
		}
		if o.committed {
			want = append(want, o.ids...)
		}
	}
	slices.Sort(want)
	got := committed(t, f.db)
	if !slices.Equal(got, want) {
		t.Fatalf("committed %v, want what the writers were told committed: %v", got, want)
	}
	if r := reads(t, f.db); !slices.Equal(r, got) {
		t.Fatalf("read %v, want each of %v once in ID order", r, got)
	}
	if l := lost(t, f.db); len(l) != 0 {
		t.Fatalf("skipped %v", l)
	}
	t.Logf("%d events committed and read once in order; %d appends gave up or waited for the fence and were refused; of the writers that raced the reader past their TTL, %d committed (and were read), %d were refused",
		len(got), refused, racedIn, racedOut)
}
