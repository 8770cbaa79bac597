package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed-e8569b35/ordo/client"
)

// Watermarker is the part of Ordo's Go client a reader needs: the settled
// mark W (client.Mark.ID). Every ID below W was completed, abandoned or
// expired (can never be completed again) or handed out by plain Next.
type Watermarker interface {
	Watermark(ctx context.Context) (client.Mark, error)
}

// Event is one row of events.
type Event struct {
	ID      uint64
	Payload string
}

// Batch is what one Next read: every event with From <= ID < To, in ID
// order. The reader's checkpoint moves from From to To when the batch's
// transaction commits.
type Batch struct {
	From, To uint64
	Events   []Event
}

// Reader tails the events table by Ordo's W with a checkpoint in the
// database. Run one Next at a time per Name: a second process with the
// same Name waits on the checkpoint row and then continues after it.
type Reader struct {
	DB   DB
	Ordo Watermarker
	// Name keys the checkpoint row.
	Name string
	// Limit caps the events of one batch; 0 means no cap.
	Limit int
	// LockWait bounds the wait for the fence lock (lock_timeout); 0 means
	// 1 s. Writers' commits queue behind the reader while it waits, so it
	// is kept short; legitimate holders hold the lock only while they
	// commit.
	LockWait time.Duration
	// TerminateAfter, when the fence lock was not had within LockWait,
	// ends the sessions that hold a lock on event_fence in a mode the
	// reader's waits for and whose transaction began more than this long
	// ago, then tries once more. Set it to the longest reservation TTL
	// (writers reserve before they begin, so such a writer's reservation
	// has expired); 0 never ends any. It needs the right to signal them
	// (the same role, or pg_signal_backend).
	TerminateAfter time.Duration
}

// Next fences the events table at Ordo's current W and reads the next
// batch above the checkpoint. process runs inside the transaction that
// moves the checkpoint, so what it writes through tx commits if and only
// if the checkpoint moves past the batch: exactly once. An error from
// process rolls both back; the next Next reads the same batch again.
// process is not called for a batch without events.
func (r *Reader) Next(ctx context.Context, process func(context.Context, pgx.Tx, Batch) error) (Batch, error) {
	w, err := r.Ordo.Watermark(ctx)
	if err != nil {
		return Batch{}, fmt.Errorf("watermark: %w", err)
	}
	if err := r.Fence(ctx, w.ID); err != nil {
		return Batch{}, err
	}
	return r.read(ctx, process)
}

// Fence raises the fence to w unless it is there already. When it
// returns nil, every transaction that checked a lower fence has ended and
// its outcome is visible to any snapshot taken from now on, and every
// later commit of an event below w fails. Fencing at Ordo's W fails no writer whose
// reservation is still open: their IDs are all at or above W.
func (r *Reader) Fence(ctx context.Context, w uint64) error {
	err := r.raise(ctx, w)
	if pgCode(err) != codeLockTimeout {
		return err
	}
	if r.TerminateAfter <= 0 {
		return fmt.Errorf("%w: %w", ErrFenceBusy, err)
	}
	if err := r.endStale(ctx); err != nil {
		return err
	}
	if err := r.raise(ctx, w); err != nil {
		if pgCode(err) == codeLockTimeout {
			return fmt.Errorf("%w: after ending stale holders: %w", ErrFenceBusy, err)
		}
		return err
	}
	return nil
}

// raise is the fence transaction. LOCK TABLE rather than the UPDATE's own
// row lock: a row lock lets every new FOR SHARE locker in ahead of a
// waiting UPDATE, so overlapping commits could starve the reader, while
// the table lock queues them behind it.
func (r *Reader) raise(ctx context.Context, w uint64) error {
	fence, err := toBigint(w)
	if err != nil {
		return fmt.Errorf("watermark: %w", err)
	}
	return pgx.BeginTxFunc(ctx, r.DB, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var cur int64
		if err := tx.QueryRow(ctx, "SELECT fence FROM event_fence").Scan(&cur); err != nil {
			return fmt.Errorf("read fence: %w", err)
		}
		if cur >= fence {
			return nil // no lock: an idle tail costs the writers nothing
		}
		wait := r.LockWait
		if wait <= 0 {
			wait = time.Second
		}
		// Also ends a wait orphaned by a client that went away: a backend
		// blocked on a lock does not notice its client is gone.
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", max(wait.Milliseconds(), 1))); err != nil {
			return fmt.Errorf("set lock_timeout: %w", err)
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE event_fence IN EXCLUSIVE MODE"); err != nil {
			return fmt.Errorf("lock fence: %w", err)
		}
		if _, err := tx.Exec(ctx, "UPDATE event_fence SET fence = $1 WHERE fence < $1", fence); err != nil {
			return fmt.Errorf("raise fence to %d: %w", fence, err)
		}
		return nil
	})
}

// endStale terminates the sessions whose transaction began more than
// TerminateAfter ago and that hold a lock on event_fence that conflicts
// with EXCLUSIVE (any but ACCESS SHARE). Terminating one aborts its
// transaction: whatever it had not committed is not written.
func (r *Reader) endStale(ctx context.Context) error {
	const q = `SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid, 5000))
		FROM pg_stat_activity a
		WHERE a.pid <> pg_backend_pid()
		AND a.xact_start < now() - make_interval(secs => $1)
		AND a.pid IN (SELECT l.pid FROM pg_locks l
			WHERE l.locktype = 'relation' AND l.relation = 'event_fence'::regclass
			AND l.granted AND l.mode <> 'AccessShareLock')`
	return pgx.BeginTxFunc(ctx, r.DB, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, q, r.TerminateAfter.Seconds()).Scan(&n); err != nil {
			return fmt.Errorf("end stale fence holders: %w", err)
		}
		return nil
	})
}

// read is the read transaction, begun after the fence transaction
// committed: every statement's snapshot sees every event below the fence
// that will ever commit.
func (r *Reader) read(ctx context.Context, process func(context.Context, pgx.Tx, Batch) error) (Batch, error) {
	var b Batch
	err := pgx.BeginTxFunc(ctx, r.DB, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var err error
		if b, err = r.batch(ctx, tx); err != nil {
			return err
		}
		if len(b.Events) > 0 {
			if err := process(ctx, tx, b); err != nil {
				return fmt.Errorf("process events [%d, %d): %w", b.From, b.To, err)
			}
		}
		return r.checkpoint(ctx, tx, b)
	})
	if err != nil {
		return Batch{}, err
	}
	return b, nil
}

// batch locks the checkpoint and reads the events from it up to the fence
// (or Limit events). The fence is read after the checkpoint, in its own
// statement, so its value is one committed after every writer below it.
func (r *Reader) batch(ctx context.Context, tx pgx.Tx) (Batch, error) {
	var pos, fence int64
	if _, err := tx.Exec(ctx, "INSERT INTO event_checkpoints (reader, position) VALUES ($1, 0) ON CONFLICT (reader) DO NOTHING", r.Name); err != nil {
		return Batch{}, fmt.Errorf("create checkpoint %q: %w", r.Name, err)
	}
	if err := tx.QueryRow(ctx, "SELECT position FROM event_checkpoints WHERE reader = $1 FOR UPDATE", r.Name).Scan(&pos); err != nil {
		return Batch{}, fmt.Errorf("read checkpoint %q: %w", r.Name, err)
	}
	if err := tx.QueryRow(ctx, "SELECT fence FROM event_fence").Scan(&fence); err != nil {
		return Batch{}, fmt.Errorf("read fence: %w", err)
	}
	if fence < pos {
		return Batch{}, fmt.Errorf("fence %d below checkpoint %d of %q: the fence was lowered", fence, pos, r.Name)
	}
	events, err := r.events(ctx, tx, pos, fence)
	if err != nil {
		return Batch{}, err
	}
	b := Batch{From: uint64(pos), To: uint64(fence), Events: events}
	if r.Limit > 0 && len(events) == r.Limit {
		b.To = events[len(events)-1].ID + 1
	}
	return b, nil
}

// events reads from <= id < to in ID order, at most Limit when set.
func (r *Reader) events(ctx context.Context, tx pgx.Tx, from, to int64) ([]Event, error) {
	limit := any(nil) // LIMIT NULL: no cap
	if r.Limit > 0 {
		limit = r.Limit
	}
	rows, err := tx.Query(ctx, "SELECT id, payload FROM events WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3", from, to, limit)
	if err != nil {
		return nil, fmt.Errorf("read events [%d, %d): %w", from, to, err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) {
		var id int64
		var e Event
		err := row.Scan(&id, &e.Payload)
		e.ID = uint64(id)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read events [%d, %d): %w", from, to, err)
	}
	return events, nil
}

// checkpoint stores b.To as the reader's position.
func (r *Reader) checkpoint(ctx context.Context, tx pgx.Tx, b Batch) error {
	if b.To == b.From {
		return nil
	}
	if _, err := tx.Exec(ctx, "UPDATE event_checkpoints SET position = $2 WHERE reader = $1", r.Name, int64(b.To)); err != nil {
		return fmt.Errorf("store checkpoint %d of %q: %w", b.To, r.Name, err)
	}
	return nil
}

// RecordReads is a process step that records the batch in event_reads,
// the table that shows what a reader read: its primary key (reader, id)
// makes a second read of an event fail, and seq the order of reading.
func RecordReads(reader string) func(context.Context, pgx.Tx, Batch) error {
	return func(ctx context.Context, tx pgx.Tx, b Batch) error {
		ids := make([]int64, len(b.Events))
		for i, e := range b.Events {
			ids[i] = int64(e.ID)
		}
		// WITH ORDINALITY keeps the batch's order in seq.
		_, err := tx.Exec(ctx, `INSERT INTO event_reads (reader, id)
			SELECT $1, id FROM unnest($2::bigint[]) WITH ORDINALITY AS u(id, n) ORDER BY n`, reader, ids)
		if err != nil {
			return fmt.Errorf("record reads: %w", err)
		}
		return nil
	}
}
