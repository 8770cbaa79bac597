// Package store is the settled-order recipe of docs/event-stores.md for
// PostgreSQL: writers append events under IDs reserved from Ordo, and a
// reader takes every committed event exactly once, in ID order, by
// fencing the table at Ordo's settled mark W before it reads below it.
//
// Correctness comes from the database: the fence refuses any insert below
// it, and the reader raises it under a lock that waits for every writer
// that checked an older fence. W only tells the reader how far it can
// fence without failing a writer whose reservation is still open.
package store

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Schema is the recipe's tables, the fence check on events and the guard
// on the fence row. docs/event-stores.md explains every line.
//
// events_fence is a constraint trigger deferred to COMMIT on purpose: the
// writer takes the fence row FOR SHARE (and so the fence table in ROW
// SHARE mode) only while it commits, never across a round trip to its
// client, so a writer that stalls idle in its transaction holds nothing
// the reader's fence update waits for.
const Schema = `
CREATE TABLE events (
	id      bigint PRIMARY KEY,
	payload text NOT NULL
);

-- One row: no event below fence can commit any more.
CREATE TABLE event_fence (
	only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
	fence    bigint NOT NULL CHECK (fence >= 0)
);
INSERT INTO event_fence VALUES (true, 0);

-- Each reader's position: every event below it was read.
CREATE TABLE event_checkpoints (
	reader   text PRIMARY KEY,
	position bigint NOT NULL
);

-- What a reader did with each event, written in the transaction that
-- moves its checkpoint: the exactly-once record.
CREATE TABLE event_reads (
	reader text NOT NULL,
	id     bigint NOT NULL,
	seq    bigserial,
	PRIMARY KEY (reader, id)
);

CREATE FUNCTION event_fence_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	f bigint;
BEGIN
	-- FOR SHARE: held to the end of the commit, so the reader's
	-- LOCK TABLE event_fence IN EXCLUSIVE MODE waits until this commit is
	-- visible or failed; under READ COMMITTED it reads the newest fence.
	SELECT fence INTO f FROM event_fence FOR SHARE;
	IF NEW.id < f THEN
		RAISE EXCEPTION 'event % is below the fence %: abandon the reservation and append again with a new one', NEW.id, f
			USING ERRCODE = 'ORDF1';
	END IF;
	RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER events_fence
	AFTER INSERT OR UPDATE OF id ON events
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION event_fence_check();

CREATE FUNCTION event_fence_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP <> 'UPDATE' OR NEW.fence < OLD.fence THEN
		RAISE EXCEPTION 'the fence only moves up' USING ERRCODE = 'ORDF2';
	END IF;
	-- Without the lock, writers that checked the old fence could still
	-- commit below the new one after a reader read.
	IF NOT EXISTS (SELECT 1 FROM pg_locks
			WHERE locktype = 'relation' AND relation = 'event_fence'::regclass
			AND pid = pg_backend_pid() AND granted
			AND mode IN ('ExclusiveLock', 'AccessExclusiveLock')) THEN
		RAISE EXCEPTION 'raise the fence under LOCK TABLE event_fence IN EXCLUSIVE MODE' USING ERRCODE = 'ORDF2';
	END IF;
	RETURN NEW;
END $$;

CREATE TRIGGER event_fence_guard
	BEFORE UPDATE OR DELETE ON event_fence
	FOR EACH ROW EXECUTE FUNCTION event_fence_guard();
`

// Errors a caller can tell apart with errors.Is.
var (
	// ErrFenced: the commit was refused because an event's ID is below
	// the fence (its reservation had expired and a reader moved past it).
	// Nothing was written; append again under a new reservation.
	ErrFenced = errors.New("event below the fence")
	// ErrFenceBusy: the reader could not take the fence lock within its
	// LockWait; a session holds a lock on event_fence (see TerminateAfter).
	ErrFenceBusy = errors.New("fence lock busy")
	// ErrCommitted: the events are committed (and will be read exactly
	// once), but Complete failed; do not append them again.
	ErrCommitted = errors.New("events committed")
)

// SQLSTATEs the recipe raises or meets.
const (
	codeFenced        = "ORDF1" // event_fence_check
	codeLockTimeout   = "55P03" // lock_not_available: lock_timeout fired
	codeSerialization = "40001" // serialization_failure
)

// DB is what the recipe needs of a connection or pool (*pgxpool.Pool,
// *pgx.Conn): transactions.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Install creates the schema unless event_fence already exists, under an
// advisory lock so that concurrent installers do not race.
func Install(ctx context.Context, db DB) error {
	return pgx.BeginTxFunc(ctx, db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('ordo event store schema'))"); err != nil {
			return fmt.Errorf("schema lock: %w", err)
		}
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass('event_fence') IS NOT NULL").Scan(&exists); err != nil {
			return fmt.Errorf("look for event_fence: %w", err)
		}
		if exists {
			return nil
		}
		if _, err := tx.Exec(ctx, Schema); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
		return nil
	})
}

// pgCode is err's SQLSTATE, or "" when the server did not answer one.
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// toBigint converts an Ordo ID for a bigint column. 64-bit layouts keep
// the sign bit clear (layout.Validate), so this fails only for the
// presets whose time field owns it, once their clock reaches it.
func toBigint(id uint64) (int64, error) {
	if id > math.MaxInt64 {
		return 0, fmt.Errorf("ID %d does not fit a bigint column", id)
	}
	return int64(id), nil
}
