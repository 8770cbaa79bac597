package main

import (
	"encoding/json"
	"os"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/verify"
)

// crashBeforeAnswerExit is the exit code of a node that ended itself
// between a keyed call's commit and its answer.
const crashBeforeAnswerExit = 86

// crashBeforeKeyedAnswer is the server.TestHooks.AfterKeyedCommit of
// ordo serve --test-crash-before-keyed-answer path: while the file at
// path holds verify.CrashArm, the first keyed call committed on this node
// as the leader ends the process before it is answered, after writing
// what was committed (a verify.CrashRecord, as JSON) over the file. Every
// keyed call answered after it found the file armed waits for the end,
// so no answer leaves between the crash's commit and the exit. Otherwise
// the hook only reads the file: the crash is armed from outside the
// process (by ordo verify's nemesis), as the clock offset is, and the
// server knows nothing of the file.
func crashBeforeKeyedAnswer(path string, logger hclog.Logger) func(key fsm.Keyed, seq string, first, count uint64) {
	var mu sync.Mutex
	return func(key fsm.Keyed, seq string, first, count uint64) {
		mu.Lock()
		defer mu.Unlock()
		b, err := os.ReadFile(path)
		if err != nil || strings.TrimSpace(string(b)) != verify.CrashArm {
			return
		}
		rec, _ := json.Marshal(verify.CrashRecord{Caller: key.Caller, Key: key.Key, Seq: seq, First: first, Count: count})
		if err := writeSynced(path, rec); err != nil {
			logger.Error("TEST CRASH: record the committed keyed call", "file", path, "error", err)
		}
		logger.Error("TEST CRASH: ending the process between a keyed call's commit and its answer", "key", key.Key, "seq", seq, "first", first, "count", count)
		os.Exit(crashBeforeAnswerExit)
	}
}

// writeSynced replaces the file at path with b, synced to disk.
func writeSynced(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
