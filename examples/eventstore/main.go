// Command eventstore is the settled-order recipe of docs/event-stores.md
// as a program: writers append events to PostgreSQL under IDs reserved
// from Ordo, and a reader tails them by Ordo's settled mark W, exactly
// once and in ID order, with its checkpoint in the database.
//
//	eventstore append --ordo ADDRS --pg DSN --n N [--batch B] [--ttl D]
//	                  [--stall D --stall-every K] [--abandon-every K]
//	eventstore read   --ordo ADDRS --pg DSN [--reader NAME] [--follow]
//
// append prints one JSON line per transaction, {"ids":["..."],
// "committed":true} (with "stalled", "abandoned", "error" when they apply;
// --stall and --abandon-every are for tests: a writer that stalls between
// its insert and its COMMIT, past its TTL, and one that gives up); read
// one per event, {"id":"...","payload":"..."}, after the batch's transaction
// (which records it in event_reads) committed. event_reads is the
// exactly-once record; a reader killed between a commit and its printing
// loses those lines from its output, not from the table.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/examples/eventstore/store"
)

var errUsage = errors.New("usage")

const usage = `usage:
  eventstore append --ordo ADDRS --pg DSN --n N [--batch B] [--ttl D]
                    [--stall D --stall-every K] [--abandon-every K]
  eventstore read   --ordo ADDRS --pg DSN [--reader NAME] [--limit N] [--follow]`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintf(os.Stderr, "eventstore: %v\n%s\n", err, usage)
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "eventstore: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command", errUsage)
	}
	switch args[0] {
	case "append":
		return runAppend(ctx, args[1:], out)
	case "read":
		return runRead(ctx, args[1:], out)
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}

// conns are the connections both commands need.
type conns struct {
	ordo *client.Client
	db   *pgxpool.Pool
}

func (c conns) Close() {
	c.db.Close()
	c.ordo.Close()
}

// common registers --ordo and --pg and returns how to connect.
func common(fs *flag.FlagSet) func(ctx context.Context) (conns, error) {
	addrs := fs.String("ordo", "", "comma-separated addresses of Ordo nodes")
	dsn := fs.String("pg", "", "PostgreSQL connection string (keyword/value or URL)")
	return func(ctx context.Context) (conns, error) {
		if *addrs == "" || *dsn == "" {
			return conns{}, fmt.Errorf("%w: --ordo and --pg are required", errUsage)
		}
		c, err := client.New(strings.Split(*addrs, ","))
		if err != nil {
			return conns{}, fmt.Errorf("%w: --ordo: %v", errUsage, err)
		}
		db, err := pgxpool.New(ctx, *dsn)
		if err != nil {
			c.Close()
			return conns{}, fmt.Errorf("%w: --pg: %v", errUsage, err)
		}
		if err := store.Install(ctx, db); err != nil {
			c.Close()
			db.Close()
			return conns{}, err
		}
		return conns{c, db}, nil
	}
}

func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected %q", errUsage, fs.Arg(0))
	}
	return nil
}

func runAppend(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("append", flag.ContinueOnError)
	connect := common(fs)
	n := fs.Int("n", 1, "how many events")
	batch := fs.Int("batch", 1, "events per transaction (one reservation each)")
	ttl := fs.Duration("ttl", 0, "reservation TTL (0: the server's default)")
	stall := fs.Duration("stall", 0, "with --stall-every: how long a stalled transaction waits between its insert and its COMMIT")
	stallEvery := fs.Int("stall-every", 0, "stall every K-th transaction (0: none)")
	abandonEvery := fs.Int("abandon-every", 0, "roll back and abandon every K-th transaction (0: none)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *n < 1 || *batch < 1 {
		return fmt.Errorf("%w: --n and --batch must be at least 1", errUsage)
	}
	c, err := connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	w := &store.Writer{DB: c.db, Ordo: c.ordo, TTL: *ttl}
	enc := json.NewEncoder(out)
	for i, done := 1, 0; done < *n; i++ {
		size := min(*batch, *n-done)
		var line appended
		switch {
		case every(i, *abandonEvery):
			line, err = abandon(ctx, w, payloads(done, size))
		case every(i, *stallEvery):
			line, err = stalled(ctx, w, payloads(done, size), *stall)
		default:
			line, err = appendOne(ctx, w, payloads(done, size))
		}
		if err != nil {
			return fmt.Errorf("append events %d to %d: %w", done, done+size-1, err)
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
		done += size
	}
	return nil
}

func every(i, k int) bool { return k > 0 && i%k == 0 }

// appended is one output line of append.
type appended struct {
	IDs       []string `json:"ids"`
	Committed bool     `json:"committed"`
	Stalled   bool     `json:"stalled,omitempty"`
	Abandoned bool     `json:"abandoned,omitempty"`
	Error     string   `json:"error,omitempty"`
}

// appendOne is the recipe's append: retried under a new reservation when
// the fence refuses it.
func appendOne(ctx context.Context, w *store.Writer, payloads []string) (appended, error) {
	ids, err := w.Append(ctx, payloads)
	if err != nil && !errors.Is(err, store.ErrCommitted) {
		return appended{}, err
	}
	line := appended{IDs: strs(ids), Committed: true}
	if err != nil {
		// Committed, and so read exactly once; only Complete failed.
		line.Error = err.Error()
	}
	return line, nil
}

// stalled inserts, waits d (past the TTL, when d is longer), then tries
// to commit once: refused by the fence, or committed and read.
func stalled(ctx context.Context, w *store.Writer, payloads []string, d time.Duration) (appended, error) {
	p, err := w.Begin(ctx, payloads)
	if err != nil {
		return appended{}, err
	}
	line := appended{IDs: strs(p.Reservation.IDs), Stalled: true}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	err = p.Commit(ctx)
	line.Committed = err == nil || errors.Is(err, store.ErrCommitted)
	if err != nil {
		line.Error = err.Error()
	}
	return line, nil
}

// abandon inserts, then rolls back and abandons.
func abandon(ctx context.Context, w *store.Writer, payloads []string) (appended, error) {
	p, err := w.Begin(ctx, payloads)
	if err != nil {
		return appended{}, err
	}
	line := appended{IDs: strs(p.Reservation.IDs), Abandoned: true}
	if err := p.Rollback(ctx); err != nil {
		line.Error = err.Error()
	}
	return line, nil
}

// payloads names events from this process: pid and sequence number.
func payloads(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"pid":%d,"n":%d}`, os.Getpid(), from+i)
	}
	return out
}

func strs(ids []uint64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatUint(id, 10)
	}
	return out
}

func runRead(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("read", flag.ContinueOnError)
	connect := common(fs)
	name := fs.String("reader", "eventstore", "the reader's name: its checkpoint and event_reads rows")
	limit := fs.Int("limit", 1000, "most events per batch")
	follow := fs.Bool("follow", false, "keep tailing once caught up, until interrupted")
	poll := fs.Duration("poll", 200*time.Millisecond, "with --follow, how long to wait when caught up")
	lockWait := fs.Duration("lock-wait", time.Second, "the longest wait for the fence lock per attempt")
	terminateAfter := fs.Duration("terminate-after", 0, "end sessions holding the fence lock in transactions older than this (set to the longest TTL; 0: never)")
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	r := &store.Reader{DB: c.db, Ordo: c.ordo, Name: *name, Limit: *limit, LockWait: *lockWait, TerminateAfter: *terminateAfter}
	return tail(ctx, r, *follow, *poll, out)
}

// tail reads batches until caught up (or, following, until ctx ends). A
// busy fence lock is reported and retried: it holds the reader back, it
// never makes it skip.
func tail(ctx context.Context, r *store.Reader, follow bool, poll time.Duration, out io.Writer) error {
	enc := json.NewEncoder(out)
	for {
		b, err := r.Next(ctx, store.RecordReads(r.Name))
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, store.ErrFenceBusy):
			fmt.Fprintf(os.Stderr, "eventstore: %v; retrying\n", err)
		case err != nil:
			return err
		}
		for _, e := range b.Events {
			line := map[string]string{"id": strconv.FormatUint(e.ID, 10), "payload": e.Payload}
			if err := enc.Encode(line); err != nil {
				return err
			}
		}
		if len(b.Events) > 0 || err != nil {
			continue
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
	}
}
