package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
)

// Reservation is what Ordo's Reserve answers: the IDs to write under and
// the handle to settle them with.
type Reservation = client.Reservation

// Sequencer is the part of Ordo's Go client a writer needs
// (*client.Client, or a fake in tests).
type Sequencer interface {
	Reserve(ctx context.Context, count int, ttl time.Duration) (Reservation, error)
	Complete(ctx context.Context, handle string) error
	Abandon(ctx context.Context, handle string) (api.Fate, error)
}

// Writer appends events under reserved IDs. Every writer of the events
// table must be one: an ID from plain Next counts as settled at once, so
// a reader may fence past it before it commits, and the fence refuses it.
type Writer struct {
	DB   DB
	Ordo Sequencer
	// TTL of each reservation; 0 is the server's default.
	TTL time.Duration
	// Attempts bounds how often Append reserves anew after a refusal by
	// the fence; 0 means 3.
	Attempts int

	// iso is the writers' isolation level: READ COMMITTED unless a test
	// sets it. REPEATABLE READ and SERIALIZABLE are safe too, but their
	// commit fails (40001) whenever the fence moved during the
	// transaction, even for IDs above it.
	iso pgx.TxIsoLevel
}

// Append writes one event per payload in one transaction, under IDs from
// one reservation, and completes it. When the fence refuses the commit
// (the reservation expired and a reader moved past it) it abandons the
// reservation and tries again under a new one. Once the commit succeeded
// the events will be read exactly once, whatever Complete answers: an
// error then wraps ErrCommitted.
func (w *Writer) Append(ctx context.Context, payloads []string) ([]uint64, error) {
	attempts := w.Attempts
	if attempts <= 0 {
		attempts = 3
	}
	var err error
	for range attempts {
		var p *Pending
		if p, err = w.Begin(ctx, payloads); err != nil {
			return nil, err
		}
		if err = p.Commit(ctx); err == nil || errors.Is(err, ErrCommitted) {
			return p.Reservation.IDs, err
		}
		if !retryable(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("append: %d attempts: %w", attempts, err)
}

// retryable: nothing was written, and a new reservation may succeed.
func retryable(err error) bool {
	return errors.Is(err, ErrFenced) || pgCode(err) == codeSerialization
}

// Pending is a writer's open transaction: its events are inserted under
// the reservation's IDs, not yet committed.
type Pending struct {
	Reservation Reservation
	tx          pgx.Tx
	ordo        Sequencer
}

// Begin reserves one ID per payload, opens a transaction and inserts the
// events. Commit or Rollback must follow.
func (w *Writer) Begin(ctx context.Context, payloads []string) (*Pending, error) {
	r, err := w.Ordo.Reserve(ctx, len(payloads), w.TTL)
	if err != nil {
		return nil, fmt.Errorf("reserve %d IDs: %w", len(payloads), err)
	}
	p := &Pending{Reservation: r, ordo: w.Ordo}
	iso := w.iso
	if iso == "" {
		iso = pgx.ReadCommitted
	}
	if p.tx, err = w.DB.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso}); err != nil {
		return nil, p.abandon(ctx, fmt.Errorf("begin: %w", err))
	}
	if err := insert(ctx, p.tx, r.IDs, payloads); err != nil {
		_ = p.tx.Rollback(ctx)
		return nil, p.abandon(ctx, err)
	}
	return p, nil
}

// insert writes the events in one statement. The fence is not checked
// here but at COMMIT (events_fence is deferred).
func insert(ctx context.Context, tx pgx.Tx, ids []uint64, payloads []string) error {
	if len(ids) != len(payloads) {
		return fmt.Errorf("reserved %d IDs for %d events", len(ids), len(payloads))
	}
	keys := make([]int64, len(ids))
	for i, id := range ids {
		k, err := toBigint(id)
		if err != nil {
			return err
		}
		keys[i] = k
	}
	_, err := tx.Exec(ctx, "INSERT INTO events (id, payload) SELECT * FROM unnest($1::bigint[], $2::text[])", keys, payloads)
	if err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	return nil
}

// Commit commits the events and completes the reservation. When the
// commit fails it abandons the reservation; the error wraps ErrFenced
// when the fence refused it. Abandoning is safe even when the commit's
// outcome is unknown (a lost connection): whether a reader sees the events
// depends only on the fence, never on the reservation's fate.
func (p *Pending) Commit(ctx context.Context) error {
	if err := p.tx.Commit(ctx); err != nil {
		if pgCode(err) == codeFenced {
			err = fmt.Errorf("%w: %w", ErrFenced, err)
		}
		return p.abandon(ctx, fmt.Errorf("commit: %w", err))
	}
	if err := p.ordo.Complete(ctx, p.Reservation.Handle); err != nil {
		// Committed above the fence as it stood at COMMIT, so a reader
		// reads them even if the reservation expired meanwhile.
		return fmt.Errorf("%w; complete %s: %w", ErrCommitted, p.Reservation.Handle, err)
	}
	return nil
}

// Rollback gives the events up and abandons the reservation, so that W
// need not wait for its TTL.
func (p *Pending) Rollback(ctx context.Context) error {
	if err := p.tx.Rollback(ctx); err != nil {
		return p.abandon(ctx, fmt.Errorf("rollback: %w", err))
	}
	return p.abandon(ctx, nil)
}

// abandon abandons the reservation and returns cause joined with any
// error Abandon answered (the reservation then expires by its TTL).
func (p *Pending) abandon(ctx context.Context, cause error) error {
	if _, err := p.ordo.Abandon(ctx, p.Reservation.Handle); err != nil {
		return errors.Join(cause, fmt.Errorf("abandon %s: %w", p.Reservation.Handle, err))
	}
	return cause
}
