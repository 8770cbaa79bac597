//go:build unix

package store

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The PostgreSQL server these tests share: started on first use, the way
// cluster_test's startPostgres does (initdb and postgres from Debian's
// /usr/lib/postgresql/<ver>/bin, as the postgres user when the test runs
// as root, on a Unix socket in a fresh directory), stopped by TestMain.
// Each test gets a database of its own.
var server struct {
	once  sync.Once
	sock  string // socket directory; "" when not started
	skip  string // why no server, when none
	stop  func()
	count atomic.Int64 // databases created, for their names
}

// requirePostgresEnv, when set (as .ci/run sets it once PostgreSQL is
// installed), turns every reason to skip into a failure.
const requirePostgresEnv = "ORDO_REQUIRE_POSTGRES"

// port names the socket file (.s.PGSQL.<port>); with listen_addresses
// empty nothing listens on TCP, so any port is free.
const port = "5432"

func TestMain(m *testing.M) {
	code := m.Run()
	if server.stop != nil {
		server.stop()
	}
	os.Exit(code)
}

// newDB gives the test a fresh database with the schema installed, and a
// pool on it. It skips the test when no server can start, or fails it
// under ORDO_REQUIRE_POSTGRES.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	server.once.Do(startServer)
	if server.sock == "" {
		if os.Getenv(requirePostgresEnv) != "" {
			t.Fatalf("%s is set, but %s", requirePostgresEnv, server.skip)
		}
		t.Skip(server.skip)
	}
	name := fmt.Sprintf("t%d", server.count.Add(1))
	admin := connect(t, "postgres")
	mustExec(t, admin, "CREATE DATABASE "+name)
	db := connect(t, name)
	t.Cleanup(func() {
		closePool(t, db)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
	})
	ctx := testCtx(t)
	if err := Install(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db
}

// connect opens a pool on database name, closed when the test ends.
func connect(t *testing.T, name string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(fmt.Sprintf("host=%s port=%s user=postgres dbname=%s sslmode=disable connect_timeout=30", server.sock, port, name))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 12
	db, err := pgxpool.NewWithConfig(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closePool(t, db) })
	return db
}

// closePool closes db, which waits for every connection to come back: a
// test that failed with a transaction open would hang there, so the wait
// is bounded, and past it the pool is left behind.
func closePool(t *testing.T, db *pgxpool.Pool) {
	closed := make(chan struct{})
	go func() { db.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Errorf("closing the pool on %s: a connection is still held after a minute", db.Config().ConnConfig.Database)
	}
}

// mustExec runs one statement outside any transaction.
func mustExec(t *testing.T, db *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(testCtx(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// testCtx bounds one step of a test: every wait has a deadline, generous
// for a loaded machine.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startServer starts the shared server, or records in server.skip why it
// cannot.
func startServer() {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		server.skip = "no PostgreSQL server: /usr/lib/postgresql/<ver>/bin/initdb is missing (apt-get install postgresql)"
		return
	}
	slices.Sort(bins)
	bin := filepath.Dir(bins[len(bins)-1])
	// Not a test's temp dir: the postgres user must reach it.
	base, err := os.MkdirTemp("", "ordo-eventstore-pg-")
	if err != nil {
		server.skip = fmt.Sprintf("no PostgreSQL server can start: %v", err)
		return
	}
	cred, err := credential(base)
	if err != nil {
		os.RemoveAll(base)
		server.skip = fmt.Sprintf("no PostgreSQL server can start: %v", err)
		return
	}
	stop, err := runServer(bin, base, cred)
	if err != nil {
		os.RemoveAll(base)
		server.skip = fmt.Sprintf("no PostgreSQL server can start: %v", err)
		return
	}
	server.sock = base
	server.stop = func() { stop(); os.RemoveAll(base) }
}

// credential is the postgres user's, for initdb and postgres, which
// refuse to run as root; nil when this process is not root. It gives dir
// to that user.
func credential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and no postgres user to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// runServer initializes a cluster in base/data, starts postgres on a
// socket in base and waits until it answers; stop shuts it down.
func runServer(bin, base string, cred *syscall.Credential) (stop func(), err error) {
	command := func(ctx context.Context, name string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
		cmd.Dir = base
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		return cmd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data := filepath.Join(base, "data")
	if out, err := command(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	logPath := filepath.Join(base, "postgres.log")
	// Not bounded by a context: it runs until stop.
	srv := command(context.Background(), "postgres", "-D", data, "-k", base, "-p", port,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=60")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	srv.Stdout, srv.Stderr = logFile, logFile
	if err := srv.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	exited := make(chan struct{})
	go func() { srv.Wait(); close(exited) }()
	stop = func() {
		// SIGINT is PostgreSQL's fast shutdown; then SIGKILL, bounded.
		_ = srv.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = srv.Process.Kill()
			<-exited
		}
		logFile.Close()
	}
	if err := awaitServer(ctx, base, exited); err != nil {
		stop()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%w\n%s", err, log)
	}
	return stop, nil
}

// awaitServer waits until the server in sock answers a query, it exits,
// or ctx ends.
func awaitServer(ctx context.Context, sock string, exited <-chan struct{}) error {
	dsn := fmt.Sprintf("host=%s port=%s user=postgres dbname=postgres sslmode=disable connect_timeout=5", sock, port)
	for {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("postgres exited: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("postgres does not answer: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
