//go:build unix

package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// fixture is one test's database, fake Ordo, writer and reader.
type fixture struct {
	db     *pgxpool.Pool
	ordo   *fakeOrdo
	writer *Writer
	reader *Reader
}

// readerName keys the tests' checkpoint and event_reads rows.
const readerName = "r"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db := newDB(t)
	o := newFakeOrdo()
	return &fixture{
		db:     db,
		ordo:   o,
		writer: &Writer{DB: db, Ordo: o},
		// A minute: a loaded machine must not turn an awaited lock wait
		// into ErrFenceBusy. The test of the bound sets its own.
		reader: &Reader{DB: db, Ordo: o, Name: readerName, LockWait: time.Minute},
	}
}

// begin is Writer.Begin for a test: a Pending the test leaves open (it
// failed first) is rolled back before the pool closes, which would wait
// for its connection for ever.
func (f *fixture) begin(t *testing.T, payloads ...string) *Pending {
	t.Helper()
	p, err := f.writer.Begin(testCtx(t), payloads)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.tx.Rollback(ctx)
	})
	return p
}

// next runs one reader step that records what it read in event_reads.
func (f *fixture) next(t *testing.T) Batch {
	t.Helper()
	b, err := f.reader.Next(testCtx(t), RecordReads(readerName))
	if err != nil {
		t.Fatalf("reader: %v", err)
	}
	return b
}

// drain reads until a batch reaches W and holds nothing.
func (f *fixture) drain(t *testing.T) {
	t.Helper()
	for {
		w, _ := f.ordo.Watermark(testCtx(t))
		if b := f.next(t); len(b.Events) == 0 && b.To >= w.ID {
			return
		}
	}
}

// ids queries a list of IDs.
func ids(t *testing.T, db *pgxpool.Pool, sql string, args ...any) []uint64 {
	t.Helper()
	rows, err := db.Query(testCtx(t), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out := make([]uint64, len(got))
	for i, id := range got {
		out[i] = uint64(id)
	}
	return out
}

// committed is every event in the table, in ID order.
func committed(t *testing.T, db *pgxpool.Pool) []uint64 {
	return ids(t, db, "SELECT id FROM events ORDER BY id")
}

// reads is what the reader recorded, in the order it read them.
func reads(t *testing.T, db *pgxpool.Pool) []uint64 {
	return ids(t, db, "SELECT id FROM event_reads WHERE reader = $1 ORDER BY seq", readerName)
}

// lost is every committed event below the reader's checkpoint that it
// never read: skipped for good.
func lost(t *testing.T, db *pgxpool.Pool) []uint64 {
	return ids(t, db, `SELECT e.id FROM events e, event_checkpoints c
		WHERE c.reader = $1 AND e.id < c.position
		AND NOT EXISTS (SELECT 1 FROM event_reads r WHERE r.reader = c.reader AND r.id = e.id)
		ORDER BY e.id`, readerName)
}

// eventIDs lists a batch's IDs.
func eventIDs(b Batch) []uint64 {
	out := []uint64{}
	for _, e := range b.Events {
		out = append(out, e.ID)
	}
	return out
}

// count runs a count query.
func count(t *testing.T, db *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(testCtx(t), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// idleInTransaction counts this database's sessions that are idle inside
// a transaction: stalled writers.
func idleInTransaction(t *testing.T, db *pgxpool.Pool) int {
	return count(t, db, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'")
}

// fenceLockWaiters counts readers blocked raising the fence.
func fenceLockWaiters(t *testing.T, db *pgxpool.Pool) int {
	return lockWaiters(t, db, "LOCK TABLE event_fence%") + lockWaiters(t, db, "UPDATE event_fence%")
}

// lockWaiters counts sessions blocked on a lock in a statement like
// pattern.
func lockWaiters(t *testing.T, db *pgxpool.Pool, pattern string) int {
	return count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock' AND query LIKE $1`, pattern)
}

// result is what a reader step in a goroutine answered.
type result struct {
	b   Batch
	err error
}

// blockedOrDone waits until the reader step running into done either
// blocks on the fence lock (true) or finishes (false, its result kept in
// *res), within a deadline.
func blockedOrDone(t *testing.T, db *pgxpool.Pool, done <-chan result, res *result) bool {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case *res = <-done:
			return false
		case <-deadline:
			t.Fatal("the reader neither blocked on the fence lock nor finished within a minute")
		case <-time.After(5 * time.Millisecond):
		}
		if fenceLockWaiters(t, db) > 0 {
			return true
		}
	}
}

// await takes the reader step's result, within a deadline.
func await(t *testing.T, done <-chan result) result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(time.Minute):
		t.Fatal("the reader step did not finish within a minute")
		return result{}
	}
}

// goNext runs one reader step in a goroutine.
func (f *fixture) goNext(ctx context.Context) <-chan result {
	done := make(chan result, 1)
	go func() {
		b, err := f.reader.Next(ctx, RecordReads(readerName))
		done <- result{b, err}
	}()
	return done
}

func equal(a, b []uint64) bool { return slices.Equal(a, b) }
