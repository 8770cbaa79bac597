//go:build unix

package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// stalledWriter: a writer inserts event 1 and stalls, idle in its
// transaction, past its TTL; its reservation expires, W passes it, the
// reader fences at W and reads past it; then the writer commits. It
// returns what the commit answered.
func stalledWriter(t *testing.T, f *fixture) error {
	ctx := testCtx(t)
	p := f.begin(t, "stalled")
	f.ordo.Expire(p.Reservation.Handle)
	if n := idleInTransaction(t, f.db); n != 1 {
		t.Fatalf("%d sessions idle in transaction, want the stalled writer's", n)
	}
	// The reader finishes while the writer is still idle in its
	// transaction: nothing it waits for is held by the writer.
	if b := f.next(t); b.To != 2 || len(b.Events) != 0 {
		t.Fatalf("reader read %v up to %d, want nothing up to W = 2", eventIDs(b), b.To)
	}
	commitErr := p.Commit(ctx)
	f.drain(t)
	return commitErr
}

// TestStalledWriterIsRefused: a writer that stalls past its TTL and then
// commits below the fence fails, and the reader skipped nothing.
func TestStalledWriterIsRefused(t *testing.T) {
	f := newFixture(t)
	err := stalledWriter(t, f)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("the stalled writer's commit answered %v, want ErrFenced", err)
	}
	if got := committed(t, f.db); len(got) != 0 {
		t.Fatalf("events %v committed below the fence", got)
	}
	if fate := f.ordo.Fate("h1"); fate != "expired" {
		t.Fatalf("reservation is %s, want expired (Abandon after a refused commit)", fate)
	}
	if got := lost(t, f.db); len(got) != 0 {
		t.Fatalf("events %v skipped", got)
	}
}

// TestStalledWriterWithoutFenceIsSkipped is the control: without the
// fence check, the same interleaving commits event 1 below the reader's
// checkpoint, and the reader never reads it.
func TestStalledWriterWithoutFenceIsSkipped(t *testing.T) {
	f := newFixture(t)
	mustExec(t, f.db, "DROP TRIGGER events_fence ON events")
	err := stalledWriter(t, f)
	if !errors.Is(err, ErrCommitted) {
		t.Fatalf("without the fence the stalled writer's commit answered %v, want committed", err)
	}
	if got := lost(t, f.db); !equal(got, []uint64{1}) {
		t.Fatalf("without the fence, skipped %v, want [1]: the interleaving no longer shows the hole", got)
	}
}

// writerInCommit: a writer has passed the fence check of its COMMIT (the
// deferred trigger ran: SET CONSTRAINTS ... IMMEDIATE runs it now, as
// COMMIT does first) but its commit is not yet visible; its reservation
// expires, so W passes it, and the reader fences and reads. Then the
// commit completes. It reports whether the reader blocked on the fence
// lock, the commit's answer and the batch the reader read meanwhile.
func writerInCommit(t *testing.T, f *fixture) (blocked bool, commitErr error, res result) {
	ctx := testCtx(t)
	p := f.begin(t, "committing")
	if _, err := p.tx.Exec(ctx, "SET CONSTRAINTS events_fence IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	f.ordo.Expire(p.Reservation.Handle)
	done := f.goNext(ctx)
	if blocked = blockedOrDone(t, f.db, done, &res); blocked {
		select {
		case res := <-done:
			t.Fatalf("the reader finished while blocked: %v", res.err)
		default:
		}
		commitErr = p.Commit(ctx)
		res = await(t, done)
	} else {
		commitErr = p.Commit(ctx)
	}
	if res.err != nil {
		t.Fatalf("reader: %v", res.err)
	}
	f.drain(t)
	return blocked, commitErr, res
}

// TestReaderWaitsForWriterInCommit: the snapshot-timing hole. A writer
// that checked the old fence and commits after the reader raised it must
// be visible to the reader's read: the reader's fence lock waits for it.
func TestReaderWaitsForWriterInCommit(t *testing.T) {
	f := newFixture(t)
	blocked, err, res := writerInCommit(t, f)
	if !blocked {
		t.Fatal("the reader did not wait for the writer that holds the fence FOR SHARE")
	}
	// Committed before the fence rose past it: read, although its
	// reservation expired (Complete says so; the fence decides).
	if !errors.Is(err, ErrCommitted) || !errors.Is(err, errExpired) {
		t.Fatalf("commit answered %v, want committed with Complete refused as expired", err)
	}
	if got := eventIDs(res.b); !equal(got, []uint64{1}) {
		t.Fatalf("the reader's batch held %v, want [1]", got)
	}
	if got := lost(t, f.db); len(got) != 0 {
		t.Fatalf("events %v skipped", got)
	}
}

// TestReaderWithoutFenceLockSkips is the control: when the check reads
// the fence without FOR SHARE, the reader does not wait, reads before the
// commit is visible, and event 1 is skipped for good.
func TestReaderWithoutFenceLockSkips(t *testing.T) {
	f := newFixture(t)
	mustExec(t, f.db, `CREATE OR REPLACE FUNCTION event_fence_check() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.id < (SELECT fence FROM event_fence) THEN RAISE EXCEPTION 'below the fence' USING ERRCODE = 'ORDF1'; END IF;
			RETURN NULL;
		END $$`)
	if blocked, _, _ := writerInCommit(t, f); blocked {
		t.Fatal("without FOR SHARE the reader still waited for the writer")
	}
	if got := lost(t, f.db); !equal(got, []uint64{1}) {
		t.Fatalf("without the lock, skipped %v, want [1]: the interleaving no longer shows the hole", got)
	}
}

// TestLaterCommitsQueueBehindReader: the reader is not starved. While it
// waits for a commit in progress, a later commit's fence check must queue
// behind it, not join the lock ahead of it (as FOR SHARE lockers of a row
// do ahead of a waiting UPDATE of that row: hence LOCK TABLE).
func TestLaterCommitsQueueBehindReader(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	first := f.begin(t, "first")
	later := f.begin(t, "later")
	if _, err := first.tx.Exec(ctx, "SET CONSTRAINTS events_fence IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	f.ordo.Expire(first.Reservation.Handle) // W = 2: later is open
	done := f.goNext(ctx)
	var res result
	if !blockedOrDone(t, f.db, done, &res) {
		t.Fatalf("the reader did not wait for the commit in progress: %v", res.err)
	}
	checked := make(chan error, 1)
	go func() {
		_, err := later.tx.Exec(ctx, "SET CONSTRAINTS events_fence IMMEDIATE")
		checked <- err
	}()
	for lockWaiters(t, f.db, "SET CONSTRAINTS%") == 0 {
		select {
		case err := <-checked:
			t.Fatalf("a later commit's check (%v) got the fence lock ahead of the waiting reader", err)
		case <-ctx.Done():
			t.Fatal("the later check neither queued nor finished")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := first.Commit(ctx); !errors.Is(err, ErrCommitted) {
		t.Fatalf("first: %v", err)
	}
	if res = await(t, done); res.err != nil || !equal(eventIDs(res.b), []uint64{1}) {
		t.Fatalf("reader: %v %v, want [1]", eventIDs(res.b), res.err)
	}
	select {
	case err := <-checked:
		if err != nil {
			t.Fatalf("later's check, above the fence: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("later's check still waits after the reader finished")
	}
	if err := later.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestIdleWritersDoNotBlockReader: Marten's #5108 case. Writers idle in
// their transactions, one past its TTL and one within it, do not hold the
// reader back; the late one is refused, the live one (above W) is not.
func TestIdleWritersDoNotBlockReader(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	late := f.begin(t, "late")
	live := f.begin(t, "live")
	f.ordo.Expire(late.Reservation.Handle)
	if n := idleInTransaction(t, f.db); n != 2 {
		t.Fatalf("%d sessions idle in transaction, want the two writers'", n)
	}
	// W = 2: the live writer's reservation is open.
	if b := f.next(t); b.To != 2 || len(b.Events) != 0 {
		t.Fatalf("reader read %v up to %d while both writers idled, want nothing up to 2", eventIDs(b), b.To)
	}
	if err := late.Commit(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("late writer: %v, want ErrFenced", err)
	}
	if err := live.Commit(ctx); err != nil {
		t.Fatalf("live writer, above W, was failed: %v", err)
	}
	f.drain(t)
	if got := reads(t, f.db); !equal(got, []uint64{2}) {
		t.Fatalf("read %v, want [2]", got)
	}
}

// TestFenceLockHolderIsBounded: a session that took the fence lock early
// (a writer that ran SET CONSTRAINTS ... IMMEDIATE, or any SELECT ... FOR
// SHARE of event_fence) and then idles. The reader gives up within
// LockWait (ErrFenceBusy), writers are not held up beyond it, and with
// TerminateAfter the reader ends the stale holder and moves on.
func TestFenceLockHolderIsBounded(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	holder := f.begin(t, "holder")
	if _, err := holder.tx.Exec(ctx, "SET CONSTRAINTS events_fence IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	f.ordo.Expire(holder.Reservation.Handle)
	f.reader.LockWait = 100 * time.Millisecond
	start := time.Now()
	if _, err := f.reader.Next(ctx, RecordReads(readerName)); !errors.Is(err, ErrFenceBusy) {
		t.Fatalf("reader: %v, want ErrFenceBusy", err)
	}
	t.Logf("the reader gave up after %v", time.Since(start))
	// Another writer commits: it queued behind the reader's lock request
	// at most until that request timed out.
	if _, err := f.writer.Append(ctx, []string{"after"}); err != nil {
		t.Fatalf("a writer after the reader gave up: %v", err)
	}
	f.reader.TerminateAfter = time.Millisecond
	if b := f.next(t); !equal(eventIDs(b), []uint64{2}) || b.To != 3 {
		t.Fatalf("after ending the holder, read %v up to %d, want [2] up to 3", eventIDs(b), b.To)
	}
	if err := holder.Commit(ctx); err == nil || errors.Is(err, ErrCommitted) {
		t.Fatalf("the terminated holder's commit answered %v, want a failure", err)
	}
	if got := committed(t, f.db); !equal(got, []uint64{2}) {
		t.Fatalf("committed %v, want [2]", got)
	}
}

// TestRepeatableReadWritersFailAcrossFenceMove: writers under REPEATABLE
// READ are safe (the fence check's FOR SHARE meets a fence row updated
// after their snapshot and fails with 40001) but fail even above the
// fence; READ COMMITTED writers read the newest fence and pass.
func TestRepeatableReadWritersFailAcrossFenceMove(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	f.writer.iso = pgx.RepeatableRead
	rr := f.begin(t, "rr")
	f.writer.iso = pgx.ReadCommitted
	rc := f.begin(t, "rc")
	// W = 1 (both open): the fence moves from 0 to 1, below both IDs.
	if b := f.next(t); b.To != 1 {
		t.Fatalf("fenced at %d, want 1", b.To)
	}
	if err := rr.Commit(ctx); pgCode(err) != codeSerialization {
		t.Fatalf("REPEATABLE READ writer above the fence: %v, want a serialization failure", err)
	}
	if err := rc.Commit(ctx); err != nil {
		t.Fatalf("READ COMMITTED writer above the fence: %v", err)
	}
	f.drain(t)
	if got := reads(t, f.db); !equal(got, []uint64{2}) {
		t.Fatalf("read %v, want [2]", got)
	}
}

// TestReaderSnapshotBeforeFenceLockSkips: the reader's isolation. A
// reader that takes its snapshot before it has the fence lock (here: one
// REPEATABLE READ transaction that reads its checkpoint first, then
// fences, then reads events) misses a writer that committed while it
// waited for the lock. The recipe reads in a transaction begun after the
// fence transaction committed (READ COMMITTED), and reads it.
func TestReaderSnapshotBeforeFenceLockSkips(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	p := f.begin(t, "committing")
	if _, err := p.tx.Exec(ctx, "SET CONSTRAINTS events_fence IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	f.ordo.Expire(p.Reservation.Handle)
	done := make(chan result, 1)
	go func() {
		b, err := wrongReader(ctx, f, 2)
		done <- result{b, err}
	}()
	var res result
	if !blockedOrDone(t, f.db, done, &res) {
		t.Fatalf("the wrong reader did not wait for the fence lock: %v", res.err)
	}
	if err := p.Commit(ctx); !errors.Is(err, ErrCommitted) {
		t.Fatalf("commit: %v", err)
	}
	if res = await(t, done); res.err != nil {
		t.Fatal(res.err)
	}
	if len(res.b.Events) != 0 {
		t.Fatalf("the snapshot-first reader read %v: the interleaving no longer shows the hole", eventIDs(res.b))
	}
	// The recipe's reader, from the same checkpoint (the wrong reader
	// stored none), reads it.
	if b := f.next(t); !equal(eventIDs(b), []uint64{1}) {
		t.Fatalf("the recipe's reader read %v, want [1]", eventIDs(b))
	}
}

// wrongReader fences at w and reads [checkpoint, w) in one REPEATABLE
// READ transaction whose snapshot it takes first.
func wrongReader(ctx context.Context, f *fixture, w int64) (Batch, error) {
	var b Batch
	err := pgx.BeginTxFunc(ctx, f.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT count(*) FROM event_checkpoints"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE event_fence IN EXCLUSIVE MODE"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE event_fence SET fence = $1 WHERE fence < $1", w); err != nil {
			return err
		}
		events, err := f.reader.events(ctx, tx, 0, w)
		b = Batch{To: uint64(w), Events: events}
		return err
	})
	return b, err
}

// TestReaderRestartResumesExactlyOnce: the checkpoint and what the reader
// did with a batch commit together, so a reader that fails inside a
// batch, loses its session, stops between fencing and reading, or is
// replaced by a new process, reads every event exactly once, in order.
func TestReaderRestartResumesExactlyOnce(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	for i := range 6 {
		if _, err := f.writer.Append(ctx, []string{fmt.Sprint(2 * i), fmt.Sprint(2*i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	f.reader.Limit = 5
	if b := f.next(t); !equal(eventIDs(b), []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("first batch %v", eventIDs(b))
	}
	errCrash := errors.New("crash")
	crash := func(ctx context.Context, tx pgx.Tx, b Batch) error {
		if err := RecordReads(readerName)(ctx, tx, b); err != nil {
			return err
		}
		return errCrash
	}
	if _, err := f.reader.Next(ctx, crash); !errors.Is(err, errCrash) {
		t.Fatalf("crashing step: %v", err)
	}
	lostSession := func(ctx context.Context, tx pgx.Tx, b Batch) error {
		if err := RecordReads(readerName)(ctx, tx, b); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
		return err
	}
	if _, err := f.reader.Next(ctx, lostSession); err == nil {
		t.Fatal("a step whose session was terminated succeeded")
	}
	if err := f.reader.Fence(ctx, 13); err != nil {
		t.Fatal(err)
	}
	// A new process: its own pool, the checkpoint from the database.
	restarted := connect(t, f.db.Config().ConnConfig.Database)
	f.reader = &Reader{DB: restarted, Ordo: f.ordo, Name: readerName, Limit: 5, LockWait: time.Minute}
	f.drain(t)
	want := committed(t, f.db)
	if len(want) != 12 {
		t.Fatalf("committed %v, want 12 events", want)
	}
	if got := reads(t, f.db); !equal(got, want) {
		t.Fatalf("read %v, want each of %v once in order", got, want)
	}
}

// TestPlainNextIDIsRefused: an ID from plain Next counts as settled when
// handed out, so the reader may fence past it before its writer commits,
// and the fence refuses it. Hence every writer of a fenced table reserves.
func TestPlainNextIDIsRefused(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	id := f.ordo.NextID()
	tx, err := f.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := insert(ctx, tx, []uint64{id}, []string{"untracked"}); err != nil {
		t.Fatal(err)
	}
	if b := f.next(t); b.To != id+1 {
		t.Fatalf("fenced at %d, want %d", b.To, id+1)
	}
	if err := tx.Commit(ctx); pgCode(err) != codeFenced {
		t.Fatalf("commit of a plain Next ID after the fence passed it: %v, want %s", err, codeFenced)
	}
}

// TestFenceOnlyMovesUpUnderTheLock: the guard on event_fence.
func TestFenceOnlyMovesUpUnderTheLock(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	if err := f.reader.Fence(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := f.reader.Fence(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if n := count(t, f.db, "SELECT fence FROM event_fence"); n != 5 {
		t.Fatalf("fence %d after fencing at 5 then 3, want 5", n)
	}
	for _, sql := range []string{
		"UPDATE event_fence SET fence = 9",
		"BEGIN; LOCK TABLE event_fence IN EXCLUSIVE MODE; UPDATE event_fence SET fence = 4; COMMIT",
		"BEGIN; LOCK TABLE event_fence IN EXCLUSIVE MODE; DELETE FROM event_fence; COMMIT",
	} {
		if _, err := f.db.Exec(ctx, sql); pgCode(err) != "ORDF2" {
			t.Errorf("%s: %v, want the guard's ORDF2", sql, err)
		}
	}
}
