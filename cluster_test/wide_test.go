//go:build unix

package cluster_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/internal/freeaddr"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/verify"
)

// nextWide asks c for one ID of the cluster's 128-bit layout: what
// mustServe asks of a cluster that refuses 64-bit calls.
func nextWide(ctx context.Context, c *client.Client) error {
	l, _, err := c.Layout(ctx)
	if err != nil {
		return err
	}
	if l.Format == layout.FormatULID {
		_, err = c.NextULID(ctx)
	} else {
		_, err = c.NextUUID(ctx)
	}
	return err
}

// TestVerifyWideLayouts runs `ordo verify`'s workload and faults that
// change the leader against clusters of the 128-bit layouts: the history
// holds the IDs' ticks and text, and passes only if every ID's text and
// bytes sort as its tick (history's rendered check) besides the usual
// real-time order.
func TestVerifyWideLayouts(t *testing.T) {
	for i, spec := range []string{"uuidv7", "ulid"} {
		t.Run(spec, func(t *testing.T) {
			mustVerifyEach(t, verify.Config{
				Binary: ordoBin, Dir: t.TempDir(), Nodes: 3, Layout: spec,
				Duration: 2 * time.Minute, Rounds: 1,
				Clients: 4, Streams: 4, Pinned: true, MaxCount: 8,
				Faults:   []string{"kill-leader", "transfer-leader", "pause-leader"},
				Interval: 2500 * time.Millisecond, Hold: 1200 * time.Millisecond, Seed: uint64(7 + i),
				ServeArgs: append([]string{"--log-level", "warn"}, fastTimers...),
				Progress:  testWriter{t},
			})
		})
	}
}

// TestNextAndDecodeWide runs `ordo next` against a cluster of each
// 128-bit layout: it prints canonical text (26-character ULIDs, 36-
// character UUIDs), in order, as lines and as JSON strings, and `ordo
// decode` takes them apart to the cluster's group; `ordo decode` refuses a
// UUID of another version with a usage error.
func TestNextAndDecodeWide(t *testing.T) {
	for _, tt := range []struct {
		spec    string
		textLen int
	}{{"ulid", 26}, {"uuidv7", 36}} {
		t.Run(tt.spec, func(t *testing.T) {
			c := mustNewCluster(t, clusterOpts{layout: tt.spec, args: []string{"--group", "7"}})
			// No timing: the IDs' time is the cluster's clock, which may
			// lead this one; an hour's margin below tells a time of now
			// from a wrong field.
			before := time.Now().Add(-time.Hour)
			lines := strings.Fields(mustRunOrdo(t, "next", "--count", "3", "--addrs", c.addrList()).Stdout)
			var body struct{ IDs []string }
			if err := json.Unmarshal([]byte(mustRunOrdo(t, "next", "--count", "2", "--json", "--addrs", c.addrList()).Stdout), &body); err != nil {
				t.Fatal(err)
			}
			all := append(lines, body.IDs...)
			if len(all) != 5 {
				t.Fatalf("ordo next printed %q, want 5 IDs", all)
			}
			for i := 1; i < len(all); i++ {
				if all[i] <= all[i-1] {
					t.Fatalf("ordo next printed %q: not strictly increasing", all)
				}
			}
			var decoded []struct {
				ID    string
				Group uint64
				Time  time.Time
			}
			if err := json.Unmarshal([]byte(mustRunOrdo(t, append([]string{"decode", "--json"}, all...)...).Stdout), &decoded); err != nil {
				t.Fatal(err)
			}
			if len(decoded) != len(all) {
				t.Fatalf("ordo decode gave %d IDs for %d", len(decoded), len(all))
			}
			for i, d := range decoded {
				if d.ID != all[i] || len(d.ID) != tt.textLen || d.Group != 7 || d.Time.Before(before) {
					t.Fatalf("ordo decode: %+v for %s, want %d characters, group 7 and a time of now", d, all[i], tt.textLen)
				}
			}
		})
	}
	if res := runOrdo(t, "decode", "550e8400-e29b-41d4-a716-446655440000"); res.Code != 2 || !strings.Contains(res.Stderr, "version 4") {
		t.Fatalf("ordo decode of a UUIDv4: exit %d, stderr %q; want 2 naming the version", res.Code, res.Stderr)
	}
}

// postgres is a PostgreSQL server this test started, reached through its
// Unix socket.
type postgres struct {
	bin, sockDir, port string
	cred               *syscall.Credential // nil: run as this user
}

// requirePostgresEnv, when set (as .ci/run sets it after installing
// PostgreSQL), turns every reason startPostgres would skip into a failure:
// otherwise a broken setup in CI would pass as a skip.
const requirePostgresEnv = "ORDO_REQUIRE_POSTGRES"

// skipPostgres skips the test for want of a PostgreSQL server, or fails
// it when requirePostgresEnv says the server must be there.
func skipPostgres(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv(requirePostgresEnv) != "" {
		t.Fatalf("%s is set, but "+format, append([]any{requirePostgresEnv}, args...)...)
	}
	t.Skipf(format, args...)
}

// pgTimeout bounds each PostgreSQL program this test runs but the server:
// initdb, and psql for one statement.
const pgTimeout = 60 * time.Second

// startPostgres starts a throwaway PostgreSQL server from Debian's
// postgresql package (or any /usr/lib/postgresql/<ver>/bin), as the
// postgres user when the test runs as root (initdb and postgres refuse
// root), on a Unix socket in a fresh directory, and stops it when the
// test ends. It skips the test, naming what is missing, when no server
// can start (skipPostgres).
func startPostgres(t *testing.T) *postgres {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		skipPostgres(t, "no PostgreSQL server: /usr/lib/postgresql/<ver>/bin/initdb is missing (apt-get install postgresql)")
	}
	slices.Sort(bins)
	if _, err := exec.LookPath("psql"); err != nil {
		skipPostgres(t, "no psql client on PATH (apt-get install postgresql-client)")
	}
	pg := &postgres{bin: filepath.Dir(bins[len(bins)-1])}
	// Not t.TempDir: the postgres user must reach the directory, and a
	// test's temp dir sits in one only this user can enter.
	base, err := os.MkdirTemp("", "ordo-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			skipPostgres(t, "running as root and no postgres user to run PostgreSQL as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		pg.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(base, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	pg.sockDir = base
	pg.port = strings.TrimPrefix(freeaddr.Loopback(t, 1)[0], "127.0.0.1:")
	data := filepath.Join(base, "data")
	initdb := pg.command(testCtx(t, pgTimeout), base, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		skipPostgres(t, "no PostgreSQL server can start: initdb: %v\n%s", err, out)
	}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	// Not bounded by a context: it runs until the cleanup below stops it.
	server := pg.command(context.Background(), base, "postgres", "-D", data, "-k", base, "-p", pg.port,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=40")
	server.Stdout, server.Stderr = logFile, logFile
	if err := server.Start(); err != nil {
		skipPostgres(t, "no PostgreSQL server can start: %v", err)
	}
	exited := make(chan struct{})
	go func() { server.Wait(); close(exited) }()
	t.Cleanup(func() {
		// SIGINT is PostgreSQL's fast shutdown; then SIGKILL, bounded.
		_ = server.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = server.Process.Kill()
			<-exited
		}
		logFile.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := pg.psql(ctx, "-c", "SELECT 1").CombinedOutput()
		cancel()
		if err == nil {
			return pg
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logFile.Name())
			skipPostgres(t, "no PostgreSQL server can start: postgres exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL does not answer within 30 s: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// command runs one of the server's programs, as the postgres user when
// this test is root, killed when ctx ends.
func (pg *postgres) command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(pg.bin, name), args...)
	cmd.Dir = dir
	if pg.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred}
	}
	return cmd
}

// psql runs psql against the server, stopping at the first error, killed
// when ctx ends.
func (pg *postgres) psql(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "psql", append([]string{"-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", pg.sockDir, "-p", pg.port, "-U", "postgres", "-d", "postgres"}, args...)...)
}

// TestPostgresOrdersUUIDv7 inserts the UUIDv7s of many concurrent clients
// of a uuidv7 cluster, through a leader kill and its restart, into a uuid
// primary-key column, each client over its own psql session, and checks
// that PostgreSQL's ORDER BY id is exactly the order of the ticks that
// history.Check accepts as the real-time order: every ID there, none
// twice, none out of place.
func TestPostgresOrdersUUIDv7(t *testing.T) {
	pg := startPostgres(t)
	if out, err := pg.psql(testCtx(t, pgTimeout), "-c", "CREATE TABLE ids (id uuid PRIMARY KEY)").CombinedOutput(); err != nil {
		t.Fatalf("create table: %v\n%s", err, out)
	}
	c := mustNewCluster(t, clusterOpts{layout: "uuidv7", args: []string{"--group", "5"}})
	l := layout.MustPreset("uuidv7")

	const clients = 8
	rec := history.NewRecorder()
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// On every path out, t.Fatal included, the clients end and with them
	// their psql sessions (each bounded by waitBounded) before the cluster
	// and the server they talk to are stopped by earlier cleanups.
	t.Cleanup(func() { stop(); wg.Wait() })
	var (
		mu    sync.Mutex
		acked int
		fails []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		fails = append(fails, fmt.Sprintf(format, args...))
		mu.Unlock()
		stop()
	}
	for i := range clients {
		cl, err := client.New(c.addrs(), client.WithAttemptTimeout(attemptTimeout))
		if err != nil {
			t.Fatal(err)
		}
		// Bounded by waitBounded, not a context: it must outlive stop()
		// long enough to finish the inserts it was given.
		session := pg.psql(context.Background())
		in, err := session.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		session.Stdout, session.Stderr = &out, &out
		if err := session.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			w := bufio.NewWriter(in)
			rng := rand.New(rand.NewPCG(uint64(i), 14))
			caller := history.Caller{Rec: rec, Client: i} // an error is Unknown: it imposes nothing on the order
			for ctx.Err() == nil {
				var values []string
				var undecodable error
				_, err := caller.Call(func() ([]uint64, []string, error) {
					octx, cancel := context.WithTimeout(ctx, opTimeout)
					defer cancel()
					ids, err := cl.NextUUIDs(octx, 1+rng.IntN(maxBatch))
					if err != nil {
						return nil, nil, err
					}
					ticks, texts := make([]uint64, len(ids)), make([]string, len(ids))
					values = make([]string, len(ids))
					for j, id := range ids {
						parts, err := l.DecodeWide(id)
						if err != nil {
							undecodable = fmt.Errorf("%s does not decode: %w", id, err)
							return nil, nil, undecodable
						}
						ticks[j], texts[j], values[j] = parts.Tick, id.String(), "('"+id.String()+"')"
					}
					return ticks, texts, nil
				})
				if undecodable != nil {
					fail("client %d: %v", i, undecodable)
					return
				}
				if err != nil {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				mu.Lock()
				acked++
				mu.Unlock()
				fmt.Fprintf(w, "INSERT INTO ids (id) VALUES %s;\n", strings.Join(values, ","))
				if err := w.Flush(); err != nil {
					fail("client %d: psql stopped taking inserts: %v", i, err)
					return
				}
			}
			in.Close()
			if err := waitBounded(session, 30*time.Second); err != nil {
				fail("client %d: psql: %v\n%s", i, err, out.String())
			}
		}()
	}
	ackedNow := func() int { mu.Lock(); defer mu.Unlock(); return acked }
	waitAcks := func(more int, what string) {
		t.Helper()
		want, deadline := ackedNow()+more, time.Now().Add(30*time.Second)
		for ackedNow() < want && ctx.Err() == nil {
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("only %d of %d acknowledged calls %s", ackedNow(), want, what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitAcks(200, "before the leader kill")
	leader := c.mustLeader()
	c.mustKill(leader)
	c.mustLeader(leader)
	waitAcks(200, "after the leader kill")
	c.mustRestart(leader)
	waitAcks(200, "after the old leader's restart")
	stop()
	wg.Wait()
	if len(fails) > 0 {
		t.Fatalf("%s", strings.Join(fails, "\n"))
	}

	ops := rec.Ops()
	rep := mustCheck(t, ops) // real-time order of the ticks, and their rendering
	type idOf struct {
		tick uint64
		text string
	}
	var want []idOf
	for _, op := range ops {
		if op.Outcome == history.OK {
			for j, tick := range op.IDs {
				want = append(want, idOf{tick, op.Rendered[j]})
			}
		}
	}
	slices.SortFunc(want, func(a, b idOf) int { return cmp.Compare(a.tick, b.tick) })
	out, err := pg.psql(testCtx(t, pgTimeout), "-A", "-t", "-c", "SELECT id FROM ids ORDER BY id").Output()
	if err != nil {
		t.Fatalf("select: %v", err)
	}
	got := strings.Fields(string(out))
	if len(got) != len(want) {
		t.Fatalf("PostgreSQL holds %d IDs, the history %d acknowledged", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i].text {
			t.Fatalf("ORDER BY id row %d is %s, the history's order has %s (tick %d) there", i, got[i], want[i].text, want[i].tick)
		}
	}
	t.Logf("%d UUIDv7s from %d clients in PostgreSQL's order, as the history's; %s", len(got), clients, rep)
}

// testCtx returns a context that ends after d, or when the test does.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitBounded waits for cmd to exit, killing it after d.
func waitBounded(cmd *exec.Cmd, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		return fmt.Errorf("still running after %s: %w", d, <-done)
	}
}
