//go:build unix

package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/examples/eventstore/store"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/layout"
)

// TestEventStore proves the settled-order recipe of docs/event-stores.md
// end to end on real processes: examples/eventstore's writers and reader
// against a PostgreSQL of its own and a three-node Ordo cluster.
//
//   - exactly-once: eight writer processes (plain, abandoning, stalling
//     past their TTL; two SIGKILLed while stalled in mid-transaction), a
//     following reader SIGKILLed once and restarted, the Ordo leader
//     SIGKILLed and restarted and leadership transferred, and a sampler of
//     W on every node. Every committed event is read exactly once, in ID
//     order; W never goes down; every stalled commit was refused (its
//     reservation expired) or read.
//   - without-fence: the same checker catches a skipped event once the
//     fence trigger is dropped (and passes the same steps with it).
//   - settle-early: against nodes whose W passes open reservations
//     (--test-unsafe-settle-early), the fence refuses a live writer, which
//     the checker reports (and the same steps pass on a correct cluster).
//
// The negative runs are driven step by step from the test (the held
// writer through the store package, the other writer and the reader as
// eventstore processes), so their interleaving is fixed.
func TestEventStore(t *testing.T) {
	begin := time.Now()
	built := make(chan error, 1)
	bin := filepath.Join(t.TempDir(), "eventstore")
	build := exec.CommandContext(testCtx(t, 5*time.Minute), "go", "build", "-o", bin, "github.com/seed-e8569b35/ordo/examples/eventstore")
	go func() { // beside PostgreSQL's start
		out, err := build.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go build examples/eventstore: %w\n%s", err, out)
		}
		built <- err
	}()
	pg := startPostgres(t)
	if err := <-built; err != nil { // bounded by the build's context
		t.Fatal(err)
	}
	c := mustNewCluster(t, clusterOpts{args: esServeArgs})
	t.Logf("PostgreSQL, eventstore and a cluster ready after %v", time.Since(begin).Round(time.Millisecond))

	t.Run("exactly-once", func(t *testing.T) { testEventStoreUnderFaults(t, pg, bin, c) })
	t.Run("without-fence", func(t *testing.T) {
		ok := runScenario(t, pg, bin, c, scenario{db: "es_fenced", ttl: time.Second, awaitPass: true})
		if !ok.rep.ok() || !errors.Is(ok.commitErr, store.ErrFenced) || ok.rep.RefusedExpired != 1 {
			t.Fatalf("with the fence: the stalled writer's commit answered %v; want it refused by the fence (reservation expired) and a clean check\n%s", ok.commitErr, ok.rep)
		}
		bad := runScenario(t, pg, bin, c, scenario{db: "es_unfenced", ttl: time.Second, awaitPass: true, dropFence: true})
		t.Logf("without the fence: the stalled writer's commit answered %v\n%s", bad.commitErr, bad.rep)
		switch {
		case bad.commitErr != nil && !errors.Is(bad.commitErr, store.ErrCommitted):
			t.Fatalf("without the fence the stalled writer's commit failed (%v): the run shows nothing", bad.commitErr)
		case bad.rep.ok() || bad.rep.exactlyOnce():
			t.Fatal("without the fence the checker found nothing wrong: it cannot catch a skipped event")
		case !slices.Equal(bad.rep.Lost, bad.held):
			t.Fatalf("without the fence the checker reports lost %v, want exactly the stalled writer's %v", bad.rep.Lost, bad.held)
		}
	})
	t.Run("settle-early", func(t *testing.T) {
		const ttl = 30 * time.Second // the held writer commits well within it
		ok := runScenario(t, pg, bin, c, scenario{db: "es_live", ttl: ttl})
		if !ok.rep.ok() || ok.commitErr != nil {
			t.Fatalf("on a correct cluster: the live writer's commit answered %v; want it committed and read\n%s", ok.commitErr, ok.rep)
		}
		u := mustNewCluster(t, clusterOpts{args: append([]string{"--test-unsafe-settle-early"}, esServeArgs...)})
		bad := runScenario(t, pg, bin, u, scenario{db: "es_early", ttl: ttl})
		t.Logf("W passing open reservations: the live writer's commit answered %v after %v of its %v TTL\n%s", bad.commitErr, bad.elapsed.Round(time.Millisecond), ttl, bad.rep)
		switch {
		case !errors.Is(bad.commitErr, store.ErrFenced):
			t.Fatalf("with W passing open reservations the live writer's commit answered %v, want it refused by the fence", bad.commitErr)
		case bad.elapsed >= ttl:
			t.Fatalf("the live writer took %v, not within its TTL %v: the run shows nothing", bad.elapsed, ttl)
		case bad.rep.ok() || bad.rep.RefusedLive != 1:
			t.Fatal("the checker did not report the live writer refused by the fence")
		case !bad.rep.exactlyOnce():
			t.Fatalf("the fence was in place, yet exactly-once failed: %s", bad.rep)
		}
	})
	t.Logf("TestEventStore took %v", time.Since(begin).Round(time.Millisecond))
}

// esServeArgs are the cluster's serve flags besides the fast timers.
var esServeArgs = []string{"--log-level", "warn", "--max-reservation-ttl", "1m"}

// Deadlines of the event-store test.
const (
	esPhaseTimeout  = 60 * time.Second // a phase of the run makes its progress
	esSettleTimeout = 30 * time.Second // W passes everything; the reader drains
	esReader        = "tail"           // the reader's name
)

// esWriter is one `eventstore append` process of the run.
type esWriter struct {
	name  string
	n     int // events, so transactions = ceil(n/batch)
	batch int
	args  []string // besides --ordo, --pg, --n and --batch
	proc  *esProc
	// killedAfter is how long its transaction had been idle when it was
	// SIGKILLed; 0 if it was not.
	killedAfter time.Duration
}

func (w *esWriter) txns() int { return (w.n + w.batch - 1) / w.batch }

// testEventStoreUnderFaults is the run of eight writer processes and a
// following reader through the faults; see TestEventStore.
func testEventStoreUnderFaults(t *testing.T, pg *postgres, bin string, c *cluster) {
	begin := time.Now()
	ctx := testCtx(t, 5*time.Minute)
	const db = "es_main"
	createDB(t, pg, db)
	mon := pgPool(t, pgDSN(pg, db, "monitor"))
	addrs := c.addrList()
	sampler := startWSampler(t, c.addrs())

	readArgs := func(app string) []string {
		return []string{"read", "--ordo", addrs, "--pg", pgDSN(pg, db, app), "--reader", esReader, "--follow", "--limit", "100", "--poll", "100ms"}
	}
	readers := []*esProc{startES(t, bin, "reader-1", readArgs("reader-1")...)}
	const stall, stallTTL, ttl = "2s", "1s", "2s"
	writers := []*esWriter{
		{name: "w0", n: 300, batch: 1, args: []string{"--ttl", ttl}},
		{name: "w1", n: 600, batch: 3, args: []string{"--ttl", ttl}},
		{name: "w2", n: 800, batch: 5, args: []string{"--ttl", ttl}},
		{name: "w3", n: 400, batch: 2, args: []string{"--ttl", ttl, "--abandon-every", "3"}},
		{name: "w4", n: 250, batch: 1, args: []string{"--ttl", ttl, "--abandon-every", "4"}},
		// Stalled past their TTL between insert and COMMIT. w5 and w6 are
		// SIGKILLed in a stall, so they are given more than they finish.
		{name: "w5", n: 1000, batch: 2, args: []string{"--ttl", stallTTL, "--stall", stall, "--stall-every", "2"}},
		{name: "w6", n: 1000, batch: 1, args: []string{"--ttl", stallTTL, "--stall", stall, "--stall-every", "3"}},
		{name: "w7", n: 24, batch: 2, args: []string{"--ttl", stallTTL, "--stall", stall, "--stall-every", "2"}},
	}
	for _, w := range writers {
		args := append([]string{"append", "--ordo", addrs, "--pg", pgDSN(pg, db, w.name), "--n", strconv.Itoa(w.n), "--batch", strconv.Itoa(w.batch)}, w.args...)
		w.proc = startES(t, bin, w.name, args...)
	}
	// Progress is the plain and abandoning writers' share of their
	// transactions reported: they are never killed.
	steady := writers[:5]
	want := 0
	for _, w := range steady {
		want += w.txns()
	}
	progress := func() float64 {
		n := 0
		for _, w := range steady {
			n += len(w.proc.output())
		}
		return float64(n) / float64(want)
	}
	at := func(frac float64, what string) {
		t.Helper()
		deadline := time.Now().Add(esPhaseTimeout)
		for progress() < frac {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the writers reported %.0f%% of their transactions within %v, want %.0f%%", what, 100*progress(), esPhaseTimeout, 100*frac)
			}
			for _, w := range steady {
				if w.proc.exited() && w.proc.exitCode() != 0 {
					t.Fatalf("%s exited with %d: %s", w.name, w.proc.exitCode(), lastLines(w.proc.stderrText(), 10))
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("%5.1fs %3.0f%%: %s", time.Since(begin).Seconds(), 100*progress(), what)
	}

	at(0.10, "kill w5 in a stall")
	killInStall(t, mon, writers[5])

	at(0.25, "kill the Ordo leader")
	old := c.mustLeader()
	c.mustKill(old)
	now := c.mustLeader(old)
	t.Logf("%s killed, %s leads", old.Name, now.Name)
	at(progress()+0.05, "restart "+old.Name)
	c.mustRestart(old)

	at(0.45, "kill the reader")
	readers[0].kill(t)
	readers = append(readers, startES(t, bin, "reader-2", readArgs("reader-2")...))

	at(0.55, "kill w6 in a stall")
	killInStall(t, mon, writers[6])

	at(0.65, "transfer leadership")
	c.mustRole(old.Name, "follower", leaderTimeout)
	mustTransferLeader(t, c, old)

	// The end: every writer done or killed, then W past every ID handed
	// out (no reservation open), then the reader caught up with it.
	for _, w := range writers {
		if w.killedAfter > 0 {
			continue
		}
		if !w.proc.waitExit(esPhaseTimeout) {
			t.Fatalf("%s still running %v after the faults: %s", w.name, esPhaseTimeout, lastLines(w.proc.stderrText(), 10))
		}
		if code := w.proc.exitCode(); code != 0 {
			t.Fatalf("%s exited with %d: %s", w.name, code, lastLines(w.proc.stderrText(), 10))
		}
	}
	t.Logf("%5.1fs: every writer done", time.Since(begin).Seconds())
	final := mustSettleAll(t, c)
	mustDrain(t, mon, final)
	reader := readers[len(readers)-1]
	if err := reader.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !reader.waitExit(exitTimeout) || reader.exitCode() != 0 {
		t.Fatalf("the reader did not exit cleanly on SIGTERM (exited: %v, code %d): %s", reader.exited(), reader.exitCode(), lastLines(reader.stderrText(), 10))
	}
	wrep := sampler.stop(t)

	// The checks.
	logs := make([]writerLog, len(writers))
	for i, w := range writers {
		logs[i] = parseAppendLines(w.name, w.proc, w.killedAfter > 0)
		if w.killedAfter == 0 && len(logs[i].lines) != w.txns() {
			t.Errorf("%s reported %d transactions, want %d", w.name, len(logs[i].lines), w.txns())
		}
	}
	l := mustLayout(t, c.admin)
	rep := checkEventStore(ctx, t, mon, logs, func(ids []uint64) (string, error) { return fateOf(ctx, c.admin, l, ids) })
	printed := checkReaderOutput(t, readers)
	if !rep.ok() {
		t.Errorf("exactly-once check failed:\n%s", rep)
	}
	if !wrep.OK() || len(wrep.downs) > 0 {
		t.Errorf("W went down: %s; per node: %v", wrep.SettledReport, wrep.downs)
	}
	if maxID := rep.MaxID; final.ID <= maxID {
		t.Errorf("final W %d is not above the highest committed ID %d", final.ID, maxID)
	}

	// The figures.
	var f struct{ appended, abandoned, stalled, stalledRefused, stalledCommitted, completeFailed, killed int }
	for _, lg := range logs {
		for _, ln := range lg.lines {
			f.appended += len(ln.IDs)
			switch {
			case ln.Abandoned:
				f.abandoned++
			case ln.Stalled && ln.Committed:
				f.stalled++
				f.stalledCommitted++
			case ln.Stalled:
				f.stalled++
				f.stalledRefused++
			}
			if ln.Committed && ln.Error != "" {
				f.completeFailed++
			}
		}
		if lg.killed {
			f.killed++
		}
	}
	for _, w := range writers {
		if w.killedAfter > 0 {
			t.Logf("%s SIGKILLed after %v idle in its transaction (stalled past its TTL)", w.name, w.killedAfter.Round(time.Millisecond))
		}
	}
	t.Logf("events: %d IDs appended in %d writer transactions reported, %d committed, %d read (%d printed by the readers); %d transactions abandoned; %d stalled past their TTL: %d refused by the fence (reservation expired), %d committed and read; %d committed with Complete failing; %d writers SIGKILLed in a stall; reader SIGKILLed once and restarted",
		f.appended, countLines(logs), rep.Committed, rep.Read, printed, f.abandoned, f.stalled, f.stalledRefused, f.stalledCommitted, f.completeFailed, f.killed)
	busy, each := 0, []string{}
	for _, r := range readers {
		busy += strings.Count(r.stderrText(), "fence lock busy")
		each = append(each, fmt.Sprintf("%s printed %d", r.name, len(r.output())))
	}
	t.Logf("reader: %s; %d fence-lock waits past its lock_timeout, retried", strings.Join(each, ", "), busy)
	t.Logf("W: %s; final W %d above every committed ID (max %d)", wrep, final.ID, rep.MaxID)
	t.Logf("run took %v", time.Since(begin).Round(time.Millisecond))
	if f.stalledRefused == 0 {
		t.Errorf("no stalled commit was refused by the fence: the run did not exercise it")
	}
}

// killInStall SIGKILLs w while its transaction has been idle (inserted,
// not committed) for over half a second, as pg_stat_activity shows:
// within one of its stalls, well before it ends.
func killInStall(t *testing.T, db *pgxpool.Pool, w *esWriter) {
	t.Helper()
	const idle = 500 * time.Millisecond
	deadline := time.Now().Add(esPhaseTimeout)
	for ; time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if w.proc.exited() {
			t.Fatalf("%s exited (code %d) before it could be killed in a stall: %s", w.name, w.proc.exitCode(), lastLines(w.proc.stderrText(), 10))
		}
		var secs float64
		err := db.QueryRow(testCtx(t, opTimeout), `SELECT coalesce(max(extract(epoch FROM clock_timestamp() - state_change)), 0)
			FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction'`, w.name).Scan(&secs)
		if err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		if d := time.Duration(secs * float64(time.Second)); d >= idle {
			w.proc.kill(t)
			w.killedAfter = d
			return
		}
	}
	t.Fatalf("%s was not seen stalled in its transaction within %v", w.name, esPhaseTimeout)
}

// mustSettleAll waits until W, read with `ordo watermark --json`, is above
// an ID handed out after every writer ended: then no reservation is
// open any more. It returns that W.
func mustSettleAll(t *testing.T, c *cluster) client.Mark {
	t.Helper()
	ctx := testCtx(t, esSettleTimeout)
	x, err := c.admin.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	begin := time.Now()
	var last client.Mark
	for deadline := begin.Add(esSettleTimeout); ; time.Sleep(100 * time.Millisecond) {
		res := runOrdo(t, "watermark", "--json", "--addrs", c.addrList())
		if res.Code == 0 {
			var m struct{ Watermark, Tick string }
			if err := json.Unmarshal([]byte(res.Stdout), &m); err != nil {
				t.Fatalf("ordo watermark --json printed %q: %v", res.Stdout, err)
			}
			last.ID, _ = strconv.ParseUint(m.Watermark, 10, 64)
			last.Tick, _ = strconv.ParseUint(m.Tick, 10, 64)
			if last.ID > x {
				t.Logf("W %d passed ID %d, handed out after the writers ended, %v later", last.ID, x, time.Since(begin).Round(time.Millisecond))
				return last
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("W (last %d, last exit %d: %s) did not pass ID %d within %v", last.ID, res.Code, res.Stderr, x, esSettleTimeout)
		}
	}
}

// mustDrain waits until the reader's checkpoint reaches w.
func mustDrain(t *testing.T, db *pgxpool.Pool, w client.Mark) {
	t.Helper()
	var pos int64
	for deadline := time.Now().Add(esSettleTimeout); ; time.Sleep(50 * time.Millisecond) {
		err := db.QueryRow(testCtx(t, opTimeout), "SELECT position FROM event_checkpoints WHERE reader = $1", esReader).Scan(&pos)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("read the checkpoint: %v", err)
		}
		if uint64(pos) >= w.ID {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reader's checkpoint %d did not reach W %d within %v", pos, w.ID, esSettleTimeout)
		}
	}
}

// checkReaderOutput checks what the reader processes printed, in order:
// IDs strictly ascending across the restart (a killed reader may lose
// the lines of its last batch, never print one twice). It returns how
// many it printed.
func checkReaderOutput(t *testing.T, readers []*esProc) int {
	t.Helper()
	var prev uint64
	n := 0
	for i, r := range readers {
		lines := r.output()
		for j, ln := range lines {
			var e struct{ ID string }
			err := json.Unmarshal([]byte(ln), &e)
			id, perr := strconv.ParseUint(e.ID, 10, 64)
			if err != nil || perr != nil {
				if i < len(readers)-1 && j == len(lines)-1 {
					continue // cut off by SIGKILL
				}
				t.Errorf("%s printed %q", r.name, ln)
				continue
			}
			if id <= prev {
				t.Errorf("%s printed ID %d after %d: not in ID order, or twice", r.name, id, prev)
			}
			prev = id
			n++
		}
	}
	return n
}

// scenario is one small run driven step by step: writer A (the store
// package, in this test) reserves with ttl and inserts, then holds its
// transaction open; writer B (an eventstore process) appends three events
// above it; with awaitPass the test waits until W passes A's ID; a
// reader process reads up to W; then A commits, everything settles, and
// the reader reads again.
type scenario struct {
	db        string
	ttl       time.Duration
	awaitPass bool
	dropFence bool
}

// scenarioResult is what a scenario saw.
type scenarioResult struct {
	held      []uint64      // A's IDs
	commitErr error         // what A's commit answered
	elapsed   time.Duration // from A's Reserve to its commit's answer
	rep       esReport
}

func runScenario(t *testing.T, pg *postgres, bin string, c *cluster, s scenario) scenarioResult {
	t.Helper()
	ctx := testCtx(t, 2*time.Minute)
	createDB(t, pg, s.db)
	db := pgPool(t, pgDSN(pg, s.db, "test"))
	if err := store.Install(ctx, db); err != nil {
		t.Fatal(err)
	}
	if s.dropFence {
		if _, err := db.Exec(ctx, "DROP TRIGGER events_fence ON events"); err != nil {
			t.Fatal(err)
		}
	}
	oc, err := client.New(c.addrs(), client.WithAttemptTimeout(attemptTimeout))
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	l := mustLayout(t, oc)
	dsn := pgDSN(pg, s.db, "es")
	runES := func(name string, args ...string) *esProc {
		t.Helper()
		p := startES(t, bin, name, append([]string{args[0], "--ordo", c.addrList(), "--pg", dsn}, args[1:]...)...)
		if !p.waitExit(esPhaseTimeout) || p.exitCode() != 0 {
			t.Fatalf("eventstore %s: exited %v, code %d: %s", strings.Join(args, " "), p.exited(), p.exitCode(), lastLines(p.stderrText(), 10))
		}
		return p
	}

	w := &store.Writer{DB: db, Ordo: oc, TTL: s.ttl}
	reserved := time.Now()
	a, err := w.Begin(ctx, []string{`{"writer":"A"}`})
	if err != nil {
		t.Fatal(err)
	}
	committed := false
	t.Cleanup(func() { // before the pool closes: it waits for A's connection
		if !committed {
			_ = a.Rollback(testCtx(t, opTimeout))
		}
	})
	res := scenarioResult{held: a.Reservation.IDs}
	b := runES("B", "append", "--n", "3", "--ttl", "10s")
	if s.awaitPass {
		for deadline := time.Now().Add(esSettleTimeout); ; time.Sleep(50 * time.Millisecond) {
			m, err := oc.Watermark(ctx)
			if err == nil && m.ID > a.Reservation.IDs[0] {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("W (%v, %v) did not pass A's ID %d within %v", m, err, a.Reservation.IDs[0], esSettleTimeout)
			}
		}
	}
	runES("read-1", "read", "--reader", "eventstore")
	res.commitErr = a.Commit(ctx)
	res.elapsed = time.Since(reserved)
	committed = true
	// Settle everything (A's fate is decided now; B completed), read again.
	x, err := oc.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(esSettleTimeout); ; time.Sleep(50 * time.Millisecond) {
		m, err := oc.Watermark(ctx)
		if err == nil && m.ID > x {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("W (%v, %v) did not pass ID %d within %v", m, err, x, esSettleTimeout)
		}
	}
	runES("read-2", "read", "--reader", "eventstore")

	aLine := appendLine{Stalled: true, Committed: res.commitErr == nil || errors.Is(res.commitErr, store.ErrCommitted)}
	for _, id := range a.Reservation.IDs {
		aLine.IDs = append(aLine.IDs, strconv.FormatUint(id, 10))
	}
	if res.commitErr != nil {
		aLine.Error = res.commitErr.Error()
	}
	logs := []writerLog{{name: "A", lines: []appendLine{aLine}}, parseAppendLines("B", b, false)}
	res.rep = checkEventStoreAs(ctx, t, db, "eventstore", logs, func(ids []uint64) (string, error) { return fateOf(ctx, oc, l, ids) })
	return res
}

// appendLine is one line `eventstore append` prints.
type appendLine struct {
	IDs       []string `json:"ids"`
	Committed bool     `json:"committed"`
	Stalled   bool     `json:"stalled"`
	Abandoned bool     `json:"abandoned"`
	Error     string   `json:"error"`
}

// writerLog is what one writer reported.
type writerLog struct {
	name   string
	pid    int // its events' payloads name it; 0: not a process
	killed bool
	lines  []appendLine
	bad    []string // lines that do not parse
}

// parseAppendLines reads p's output. A killed writer may have been cut
// off in its last line.
func parseAppendLines(name string, p *esProc, killed bool) writerLog {
	lg := writerLog{name: name, pid: p.cmd.Process.Pid, killed: killed}
	out := p.output()
	for i, s := range out {
		var ln appendLine
		if err := json.Unmarshal([]byte(s), &ln); err != nil || len(ln.IDs) == 0 {
			if !(killed && i == len(out)-1) {
				lg.bad = append(lg.bad, s)
			}
			continue
		}
		lg.lines = append(lg.lines, ln)
	}
	return lg
}

func countLines(logs []writerLog) int {
	n := 0
	for _, lg := range logs {
		n += len(lg.lines)
	}
	return n
}

// esReport is what checkEventStore found.
type esReport struct {
	Committed, Read int
	MaxID           uint64 // the highest committed ID
	Position        uint64 // the reader's checkpoint
	// Lost are committed events below the checkpoint never read: an
	// event committed below a position the reader had passed.
	Lost []uint64
	// Unread are committed events at or above the checkpoint, not read.
	Unread []uint64
	// Phantom are events read that are not committed.
	Phantom []uint64
	// Disorder describes reads out of ID order (event_reads by seq).
	Disorder []string
	// RefusedExpired and RefusedLive count the commits the fence refused
	// by the fate of their reservation: expired (as it must be), or not
	// (a live writer refused: W passed its open reservation).
	RefusedExpired, RefusedLive int
	// Problems lists every violation, those above included.
	Problems []string
}

// exactlyOnce reports whether every committed event was read exactly
// once, in ID order, and nothing else was.
func (r esReport) exactlyOnce() bool {
	return len(r.Lost) == 0 && len(r.Unread) == 0 && len(r.Phantom) == 0 && len(r.Disorder) == 0
}

func (r esReport) ok() bool { return len(r.Problems) == 0 }

func (r esReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "committed=%d read=%d checkpoint=%d lost=%d unread=%d phantom=%d out-of-order=%d refused(expired)=%d refused(live)=%d problems=%d",
		r.Committed, r.Read, r.Position, len(r.Lost), len(r.Unread), len(r.Phantom), len(r.Disorder), r.RefusedExpired, r.RefusedLive, len(r.Problems))
	for i, p := range r.Problems {
		if i == 20 {
			fmt.Fprintf(&b, "\n  ... %d more", len(r.Problems)-i)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(p)
	}
	return b.String()
}

// checkEventStore checks the run's tables for the test's reader.
func checkEventStore(ctx context.Context, t *testing.T, db *pgxpool.Pool, logs []writerLog, fate func([]uint64) (string, error)) esReport {
	return checkEventStoreAs(ctx, t, db, esReader, logs, fate)
}

// checkEventStoreAs checks, for reader:
//   - exactly once, in order: event_reads (by seq) is the committed
//     events in ascending ID order, none twice, none missing, none extra;
//     a missing one below the checkpoint was committed below a position
//     the reader had passed;
//   - the writers' lines: a committed transaction's IDs are committed and
//     read, an uncommitted one's are not in events; each writer's events
//     (their payloads name its pid) are exactly those of its committed
//     lines; no ID reported twice;
//   - each commit the fence refused had a reservation that expired (fate
//     asks the cluster): a refused live writer means W passed an open
//     reservation.
func checkEventStoreAs(ctx context.Context, t *testing.T, db *pgxpool.Pool, reader string, logs []writerLog, fate func([]uint64) (string, error)) esReport {
	t.Helper()
	var r esReport
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }

	type event struct {
		id  uint64
		pid int
	}
	rows, err := db.Query(ctx, "SELECT id, payload FROM events ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (event, error) {
		var id int64
		var payload string
		if err := row.Scan(&id, &payload); err != nil {
			return event{}, err
		}
		var p struct{ PID int }
		_ = json.Unmarshal([]byte(payload), &p)
		return event{uint64(id), p.PID}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err = db.Query(ctx, "SELECT id FROM event_reads WHERE reader = $1 ORDER BY seq", reader)
	if err != nil {
		t.Fatal(err)
	}
	reads, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	var pos int64
	if err := db.QueryRow(ctx, "SELECT coalesce((SELECT position FROM event_checkpoints WHERE reader = $1), 0)", reader).Scan(&pos); err != nil {
		t.Fatal(err)
	}
	r.Committed, r.Read, r.Position = len(events), len(reads), uint64(pos)

	committed := map[uint64]bool{}
	byPID := map[int]map[uint64]bool{}
	for _, e := range events {
		committed[e.id] = true
		r.MaxID = max(r.MaxID, e.id)
		if byPID[e.pid] == nil {
			byPID[e.pid] = map[uint64]bool{}
		}
		byPID[e.pid][e.id] = true
	}
	read := map[uint64]bool{}
	for i, id64 := range reads {
		id := uint64(id64)
		if read[id] {
			problem("event %d read twice", id) // the primary key forbids it
		}
		read[id] = true
		if i > 0 && id64 <= reads[i-1] {
			r.Disorder = append(r.Disorder, fmt.Sprintf("read %d after %d", id, reads[i-1]))
		}
		if !committed[id] {
			r.Phantom = append(r.Phantom, id)
		}
	}
	for _, e := range events {
		switch {
		case read[e.id]:
		case e.id < r.Position:
			r.Lost = append(r.Lost, e.id)
		default:
			r.Unread = append(r.Unread, e.id)
		}
	}
	for _, id := range r.Lost {
		problem("event %d committed below the reader's position %d and never read: skipped", id, r.Position)
	}
	for _, id := range r.Unread {
		problem("event %d committed at or above the reader's position %d and not read", id, r.Position)
	}
	for _, id := range r.Phantom {
		problem("event %d read but not committed", id)
	}
	for _, d := range r.Disorder {
		problem("out of ID order: %s", d)
	}

	reported := map[uint64]string{}
	for _, lg := range logs {
		for _, s := range lg.bad {
			problem("%s printed %q", lg.name, s)
		}
		mine := map[uint64]bool{}
		for _, ln := range lg.lines {
			ids := make([]uint64, len(ln.IDs))
			for i, s := range ln.IDs {
				id, err := strconv.ParseUint(s, 10, 64)
				if err != nil {
					problem("%s reported ID %q", lg.name, s)
				}
				ids[i] = id
				if other, dup := reported[id]; dup {
					problem("ID %d reported by %s and %s", id, other, lg.name)
				}
				reported[id] = lg.name
				switch {
				case ln.Committed && !committed[id]:
					problem("%s: ID %d reported committed, not in events", lg.name, id)
				case ln.Committed && !read[id]:
					problem("%s: ID %d reported committed, never read", lg.name, id)
				case !ln.Committed && committed[id]:
					problem("%s: ID %d reported not committed (%s), yet in events", lg.name, id, ln.Error)
				}
				if ln.Committed {
					mine[id] = true
				}
			}
			if !ln.Stalled || ln.Committed {
				continue
			}
			if !strings.Contains(ln.Error, "ORDF1") {
				problem("%s: stalled commit of %v failed, not by the fence: %s", lg.name, ids, ln.Error)
				continue
			}
			f, err := fate(ids)
			switch {
			case err != nil:
				problem("%s: the fate of the reservation of %v: %v", lg.name, ids, err)
			case f == api.Fate_FATE_EXPIRED.String():
				r.RefusedExpired++
			default:
				r.RefusedLive++
				problem("%s: the fence refused the commit of %v, whose reservation had not expired (%s): W passed a live writer", lg.name, ids, f)
			}
		}
		if lg.pid == 0 {
			continue
		}
		for id := range byPID[lg.pid] {
			if !mine[id] {
				problem("%s: event %d is in events but in none of its committed lines", lg.name, id)
			}
		}
	}
	return r
}

// fateOf asks the cluster for the fate of the reservation that handed out
// ids: Abandon is idempotent, and once a reservation is settled it only
// answers its fate (abandoned or expired; a completed one is refused).
func fateOf(ctx context.Context, c *client.Client, l layout.Layout, ids []uint64) (string, error) {
	h := api.Handle{First: l.Tick(ids[0]), Count: uint64(len(ids))}.String()
	actx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	f, err := c.Abandon(actx, h)
	if status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "completed") {
		return "completed", nil
	}
	if err != nil {
		return "", fmt.Errorf("abandon %s: %w", h, err)
	}
	return f.String(), nil
}

// mustLayout is the cluster's layout.
func mustLayout(t *testing.T, c *client.Client) layout.Layout {
	t.Helper()
	l, _, err := c.Layout(testCtx(t, opTimeout))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// createDB creates a database on pg.
func createDB(t *testing.T, pg *postgres, name string) {
	t.Helper()
	if out, err := pg.psql(testCtx(t, pgTimeout), "-c", "CREATE DATABASE "+name).CombinedOutput(); err != nil {
		t.Fatalf("create database %s: %v\n%s", name, err, out)
	}
}

// pgDSN is the connection string of database db on pg, naming app as
// the session's application_name (pg_stat_activity shows it).
func pgDSN(pg *postgres, db, app string) string {
	return fmt.Sprintf("host=%s port=%s user=postgres dbname=%s sslmode=disable connect_timeout=30 application_name=%s", pg.sockDir, pg.port, db, app)
}

// pgPool opens a pool, closed (bounded) when the test ends.
func pgPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	db, err := pgxpool.New(testCtx(t, opTimeout), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() { db.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(time.Minute):
			t.Errorf("a connection of the test's pool is still held after a minute")
		}
	})
	return db
}

// esProc is one eventstore process: its stdout lines are collected as
// they come, its stderr kept.
type esProc struct {
	name   string
	cmd    *exec.Cmd
	stderr lockedBuffer
	done   chan struct{} // closed once the output is read and the process reaped

	mu    sync.Mutex
	lines []string
}

// startES starts bin with args; cleanup kills it if it still runs.
func startES(t *testing.T, bin, name string, args ...string) *esProc {
	t.Helper()
	p := &esProc{name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		_ = p.cmd.Wait() // after the output is read, as StdoutPipe requires
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			p.waitExit(killTimeout)
		}
	})
	return p
}

// output is every line printed so far.
func (p *esProc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

func (p *esProc) stderrText() string { return p.stderr.String() }

func (p *esProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitExit waits up to d for the process to exit and reports whether it did.
func (p *esProc) waitExit(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// exitCode is the exit code once exited (-1 if killed by a signal or
// still running).
func (p *esProc) exitCode() int {
	if !p.exited() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// kill SIGKILLs the process and waits until it is reaped.
func (p *esProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", p.name, err)
	}
	if !p.waitExit(killTimeout) {
		t.Fatalf("%s not reaped %v after SIGKILL", p.name, killTimeout)
	}
}

// lockedBuffer is a bytes.Buffer safe to write from a process's copier
// while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// wSampler reads W from every node with bare unary Watermark calls, no
// client floor and no failover, recording each call for
// history.CheckSettled: a node's answer that goes down reaches the check
// as the node sent it.
type wSampler struct {
	rec   *history.Recorder
	stopc chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	answers map[string][]uint64 // per node, the IDs of W answered, in order
	downs   []string
	errs    map[codes.Code]int // failed reads by status code
}

// wSample is the pause between one node's reads of W.
const wSample = 25 * time.Millisecond

func startWSampler(t *testing.T, addrs []string) *wSampler {
	t.Helper()
	s := &wSampler{rec: history.NewRecorder(), stopc: make(chan struct{}), answers: map[string][]uint64{}, errs: map[codes.Code]int{}}
	for i, addr := range addrs {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		seq := api.NewSequencerClient(conn)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer conn.Close()
			for {
				select {
				case <-s.stopc:
					return
				case <-time.After(wSample):
				}
				p := s.rec.BeginSettle(i, history.CallWatermark, 0, 0)
				ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
				resp, err := seq.Watermark(ctx, &api.WatermarkRequest{})
				cancel()
				if err != nil {
					p.Unknown(err)
					s.mu.Lock()
					s.errs[status.Code(err)]++
					s.mu.Unlock()
					continue
				}
				p.Mark(resp.WatermarkTick)
				s.mu.Lock()
				prev := s.answers[addr]
				if n := len(prev); n > 0 && resp.Watermark < prev[n-1] {
					s.downs = append(s.downs, fmt.Sprintf("%s answered %d after %d", addr, resp.Watermark, prev[n-1]))
				}
				s.answers[addr] = append(prev, resp.Watermark)
				s.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() { s.halt() })
	return s
}

func (s *wSampler) halt() {
	select {
	case <-s.stopc:
	default:
		close(s.stopc)
	}
	s.wg.Wait()
}

// wReport is the sampler's findings.
type wReport struct {
	history.SettledReport
	perNode []string
	downs   []string
	errs    map[codes.Code]int
}

func (r wReport) String() string {
	return fmt.Sprintf("%d raw reads, %s; failed reads by code %v; per node: %s", r.Reads.OK+r.Reads.Failed+r.Reads.Unknown, r.SettledReport.String(), r.errs, strings.Join(r.perNode, ", "))
}

// stop ends the sampling and checks it: W never went down, neither in
// one node's answers nor between any two reads one of which ended before
// the other began (history.CheckSettled).
func (s *wSampler) stop(t *testing.T) wReport {
	t.Helper()
	s.halt()
	rep := wReport{SettledReport: history.CheckSettled(s.rec.SettleOps())}
	s.mu.Lock()
	defer s.mu.Unlock()
	rep.downs, rep.errs = s.downs, s.errs
	addrs := make([]string, 0, len(s.answers))
	for a := range s.answers {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	for _, a := range addrs {
		v := s.answers[a]
		moves := 0
		for i := 1; i < len(v); i++ {
			if v[i] != v[i-1] {
				moves++
			}
		}
		rep.perNode = append(rep.perNode, fmt.Sprintf("%s %d answers, %d moves, %d to %d", a, len(v), moves, v[0], v[len(v)-1]))
	}
	if rep.Reads.OK == 0 {
		t.Errorf("the sampler read no W")
	}
	return rep
}
