// Package startup owns what a node decides before Raft starts, from
// durable state only: the data dir (its mode, opening Raft's log, stable
// and snapshot stores with the checks that refuse a damaged or truncated
// log, and reading what it holds without starting Raft), and how the node
// enters its cluster (DecideStart: restart, bootstrap, join, or refuse),
// with the leader's side of the same rule (CheckJoinRequest).
//
// Why a package of its own: these decisions must read only what is on
// disk before it is needed (Raft's saved term, log and configuration, the
// cluster id a data dir records, and what peers read from theirs), never
// the replicated fields of a running FSM, which a restart empties until a
// leader commits. Kept apart from server, they cannot reach a Node.
//
// It does not own serving (package server), the Raft configuration, or
// backups, restores and recovery (package backup, which builds on the data
// dir functions here). It must not import server: server wires it.
package startup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/seed-e8569b35/ordo/fsm"
)

// The data dir holds the Raft log and stable store (LogStoreFile, a BoltDB
// file) and the snapshots: the high-water mark, the cluster id that peers
// recognise each other by, each node's address, and the term and vote that
// keep this node from voting twice in one term.

// LogStoreFile is the BoltDB file, in the data dir, that holds the Raft
// log and stable store.
const LogStoreFile = "raft.db"

// SnapshotRetain is how many snapshots stay on disk (server's
// SnapshotRetain): the snapshot store opened here is the one Raft
// takes its snapshots into.
const SnapshotRetain = 2

// PrepareDataDir creates dir with mode 0700, or takes group and other
// permissions away from an existing one: the data is this node's alone.
//
// An existing dir that is open to others is tightened, with a warning,
// rather than refused: Ordo itself created data dirs with mode 0750 until
// now, and refusing would stop every upgraded node until someone ran chmod.
// The dir is Ordo's, so changing its mode takes nothing from anyone. If it
// cannot be changed (another owner, a read-only file system), the node
// refuses to start, as it could not keep the data private. Files inside
// are left as they are (BoltDB creates raft.db 0600; Raft's snapshot
// files follow the umask): nobody else can reach them through a 0700 dir.
func PrepareDataDir(dir string, logger hclog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	if runtime.GOOS == "windows" {
		// No Unix permission bits there: ACLs decide who reads the dir,
		// and Chmod would only set the read-only flag.
		return nil
	}
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	perm := info.Mode().Perm()
	if perm&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(dir, perm&^0o077); err != nil {
		return fmt.Errorf("data dir %s has mode %04o, open to group or others, and cannot be limited to its owner: %w", dir, perm, err)
	}
	logger.Warn("data dir was open to group or others; removed their permissions",
		"dir", dir, "old_mode", fmt.Sprintf("%04o", perm), "new_mode", fmt.Sprintf("%04o", perm&^0o077))
	return nil
}

// KeyCurrentTerm is the stable-store key under which hashicorp/raft keeps
// the node's current term (its keyCurrentTerm, unexported): a restore
// writes it, and OpenStores refuses snapshots without it.
var KeyCurrentTerm = []byte("CurrentTerm")

// OpenStores opens the Raft log and stable store and the snapshot store in
// dataDir. A log store that cannot be read is reported as ErrCorrupt, and
// so is one without a term next to snapshots: Raft stores its term before
// it can take a snapshot, so the file was deleted, emptied or replaced,
// and the node's votes went with it. Raft must not start on either: with
// its votes lost the node could vote twice in one term, and with its log
// damaged it could count as holding entries it lacks.
func OpenStores(dataDir string, logger hclog.Logger) (*raftboltdb.BoltStore, *raft.FileSnapshotStore, error) {
	path := filepath.Join(dataDir, LogStoreFile)
	if err := checkLogStore(path); err != nil {
		return nil, nil, err
	}
	var store *raftboltdb.BoltStore
	err := catchBoltPanic(path, func() (err error) {
		store, err = raftboltdb.New(raftboltdb.Options{Path: path})
		return err
	})
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("open raft log %s: %w", path, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dataDir, SnapshotRetain, logger)
	if err != nil {
		store.Close()
		return nil, nil, fmt.Errorf("open snapshot store: %w", err)
	}
	list, err := snaps.List()
	if err != nil {
		store.Close()
		return nil, nil, fmt.Errorf("list snapshots: %w", err)
	}
	if len(list) > 0 {
		term, err := store.GetUint64(KeyCurrentTerm)
		if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
			store.Close()
			return nil, nil, fmt.Errorf("read raft log %s: %w", path, err)
		}
		if term == 0 {
			store.Close()
			return nil, nil, corrupt(path, fmt.Errorf("it holds no term, but snapshot %s exists: the log was lost, and with it the node's votes", list[0].ID))
		}
	}
	return store, snaps, nil
}

// checkLogStore reads the BoltDB file at path, if there is one with any
// bytes in it, before raft-boltdb opens it for writing (a missing or empty
// file is a new database). It returns ErrCorrupt, naming the file, when
// BoltDB cannot read it as a database, when the file is shorter than the
// pages its header says it has (a truncated copy, a full disk), or when
// walking every key of every bucket fails. The walk runs here, where
// catchBoltPanic turns a damaged page into an error; later, the same page
// would be read in one of Raft's goroutines, where a panic ends the
// process.
func checkLogStore(path string) error {
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open raft log: %w", err)
	}
	if info.Size() == 0 {
		return nil
	}
	return catchBoltPanic(path, func() error {
		// Read-only: nothing is written to a file that may be damaged,
		// and BoltDB skips its free list, which a writer must trust.
		db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
		if err != nil {
			if isOSError(err) {
				return fmt.Errorf("open raft log %s: %w", path, err)
			}
			return corrupt(path, err)
		}
		defer db.Close()
		tx, err := db.Begin(false)
		if err != nil {
			return fmt.Errorf("read raft log %s: %w", path, err)
		}
		// Deferred after db.Close, so it runs first, even in a panic: an
		// open transaction would make Close wait for ever.
		defer func() { _ = tx.Rollback() }()
		if need := tx.Size(); need > info.Size() {
			return corrupt(path, fmt.Errorf("truncated: the file has %d bytes, its pages reach to byte %d", info.Size(), need))
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read raft log %s: %w", path, err)
		}
		if err := checkPageTree(data); err != nil {
			return corrupt(path, err)
		}
		return tx.ForEach(func(_ []byte, b *bbolt.Bucket) error {
			return b.ForEach(func(_, _ []byte) error { return nil })
		})
	})
}

// isOSError reports whether err came from the operating system (a file
// that cannot be opened, locked or mapped) rather than from BoltDB finding
// that the file's contents are not a database.
func isOSError(err error) bool {
	var pathErr *fs.PathError
	var errno syscall.Errno
	return errors.As(err, &pathErr) || errors.As(err, &errno) || errors.Is(err, bbolt.ErrTimeout)
}

// catchBoltPanic runs open, which reads the BoltDB file at path, and turns
// a panic into ErrCorrupt. BoltDB trusts the pages it reads: on a damaged
// file it can index out of range, dereference nil, or read past the end of
// the file it mapped into memory. SetPanicOnFault makes such a fault a
// panic in this goroutine, as it is meant to for memory-mapped files, and
// recover makes the panic an error. Only the opening is covered, which is
// why checkLogStore reads every page there.
//
// Two limits. What recover cannot catch still ends the process (a cycle
// of pages that recurses until the stack or memory runs out), but it ends
// it before Raft starts, so the node never serves from the file. And a
// panic before the open returns (inside raftboltdb.New) leaves no handle
// to close: the file stays mapped and locked until the process exits, so
// opening it again in the same process would wait for the lock for ever.
// Callers give up on ErrCorrupt (ordo serve exits), and checkLogStore,
// which runs first, keeps that path for damage it cannot see: it opens
// read-only, which reads only the meta pages before it returns a handle,
// so its own panics come later, from the walk, and the handle is closed.
func catchBoltPanic(path string, open func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = corrupt(path, fmt.Errorf("BoltDB failed reading it: %v", r))
		}
	}()
	return open()
}

// corrupt builds the error for a Raft log file that cannot be trusted,
// saying what to do about it.
func corrupt(path string, cause error) error {
	return fmt.Errorf("%w: raft log %s: %v (restore the data dir from a backup, "+
		"or remove this node from the cluster and join it again with an empty data dir)", ErrCorrupt, path, cause)
}

// HasState reports whether dataDir holds Raft state, without starting Raft.
func HasState(dataDir string) (bool, error) {
	if _, err := os.Stat(dataDir); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	store, snaps, err := OpenStores(dataDir, hclog.NewNullLogger())
	if err != nil {
		return false, err
	}
	defer store.Close()
	return raft.HasExistingState(store, store, snaps)
}

// StoredState replays what dataDir holds, the latest snapshot and the log
// after it, into a scratch FSM, without starting Raft: which cluster the
// data belongs to, and its members' gRPC addresses. It replays the whole
// log, entries Raft has not committed yet included, so an entry it cannot
// read (fsm.Unreadable) is no reason to refuse here: the node refuses
// once Raft applies such an entry as committed.
func StoredState(dataDir string) (fsm.State, error) {
	store, snaps, err := OpenStores(dataDir, hclog.NewNullLogger())
	if err != nil {
		return fsm.State{}, err
	}
	defer store.Close()
	scratch := fsm.New(nil, nil)
	var after uint64
	if metas, err := snaps.List(); err != nil {
		return fsm.State{}, fmt.Errorf("list snapshots: %w", err)
	} else if len(metas) > 0 {
		_, rc, err := snaps.Open(metas[0].ID)
		if err != nil {
			return fsm.State{}, fmt.Errorf("open snapshot %s: %w", metas[0].ID, err)
		}
		err = scratch.Restore(rc)
		if err != nil {
			return fsm.State{}, fmt.Errorf("snapshot %s: %w", metas[0].ID, err)
		}
		after = metas[0].Index
	}
	first, err := store.FirstIndex()
	if err != nil {
		return fsm.State{}, fmt.Errorf("read raft log: %w", err)
	}
	last, err := store.LastIndex()
	if err != nil {
		return fsm.State{}, fmt.Errorf("read raft log: %w", err)
	}
	for i := max(first, after+1); first > 0 && i <= last; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return fsm.State{}, fmt.Errorf("read raft log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			scratch.Apply(&l) // a command it refuses changes nothing, as in Raft
		}
	}
	return scratch.State(), nil
}

// StoredConfiguration returns the latest Raft configuration dataDir holds,
// read without starting Raft, as Raft would on its start: the newest
// configuration entry of the log after the latest snapshot, or else that
// snapshot's configuration. Like Raft, it takes the newest entry whether
// or not it was committed. Empty when the data dir holds none.
func StoredConfiguration(dataDir string) (raft.Configuration, error) {
	store, snaps, err := OpenStores(dataDir, hclog.NewNullLogger())
	if err != nil {
		return raft.Configuration{}, err
	}
	defer store.Close()
	var conf raft.Configuration
	var after uint64
	metas, err := snaps.List()
	if err != nil {
		return raft.Configuration{}, fmt.Errorf("list snapshots: %w", err)
	}
	if len(metas) > 0 {
		conf, after = metas[0].Configuration, metas[0].Index
	}
	first, err := store.FirstIndex()
	if err != nil {
		return raft.Configuration{}, fmt.Errorf("read raft log: %w", err)
	}
	last, err := store.LastIndex()
	if err != nil {
		return raft.Configuration{}, fmt.Errorf("read raft log: %w", err)
	}
	// From the newest entry down: the first configuration found is the
	// latest, and the log before it need not be read.
	for i := last; first > 0 && i >= max(first, after+1); i-- {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return raft.Configuration{}, fmt.Errorf("read raft log entry %d: %w", i, err)
		}
		if l.Type == raft.LogConfiguration {
			return decodeConfiguration(dataDir, i, l.Data)
		}
	}
	return conf, nil
}

// decodeConfiguration decodes the configuration entry at index of
// dataDir's log. Raft's decoder panics on bytes it cannot read; such an
// entry is a damaged log, which Raft itself would stop on.
func decodeConfiguration(dataDir string, index uint64, data []byte) (conf raft.Configuration, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = corrupt(filepath.Join(dataDir, LogStoreFile), fmt.Errorf("configuration entry %d: %v", index, r))
		}
	}()
	return raft.DecodeConfiguration(data), nil
}
