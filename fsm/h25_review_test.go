package fsm

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// A restore or recovery moves a dense sequence's mark by the operator's
// skip. Next += skip wraps past 2^64, so an over-generous skip (say
// --dense-skip 18446744073709551615, "as far as it goes") puts the mark
// below what the old cluster handed out: every value from 1 is handed
// out again.
func TestH25ReviewDenseSkipMustNotWrapTheMark(t *testing.T) {
	f := sequencedFSM(t)
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "ledger", Kind: KindDense}, 1)
	allocs(t, f, 1000, Alloc{Seq: "ledger", Count: 100}) // 1..100 handed out
	st := f.state
	err := st.JumpSequences(time.Now(), time.Minute, math.MaxUint64)
	if seq := st.Sequences["ledger"]; err == nil && seq.Next <= 101 {
		t.Fatalf("dense skip of 2^64-1 over mark 101 gave no error and mark %d: values already handed out come again", seq.Next)
	}
}

// The key window is counted on each proposer's clock, and keep() evicts
// against the newest entry's reading. One leader whose clock is a day
// ahead (for one keyed call) forgets every key at once, minutes after
// they were answered: their retries get new IDs (a dense ledger books
// twice).
func TestH25ReviewOneFastClockForgetsEveryKey(t *testing.T) {
	f := sequencedFSM(t)
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "ledger", Kind: KindDense}, 1)
	t0 := int64(1_700_000_000_000)
	k := Keyed{Caller: "CN=writer", Key: "invoice-42"}
	first := allocs(t, f, t0, Alloc{Seq: "ledger", Count: 1, Keyed: k})[0]
	// A minute later, a leader whose clock is 25 h ahead answers another
	// keyed call.
	allocs(t, f, t0+time.Minute.Milliseconds()+25*time.Hour.Milliseconds(), Alloc{Seq: "ledger", Count: 1, Keyed: Keyed{Caller: "CN=other", Key: "x"}})
	// Two minutes after the first answer, by a correct clock, the writer
	// retries.
	again := allocs(t, f, t0+2*time.Minute.Milliseconds(), Alloc{Seq: "ledger", Count: 1, Keyed: k})[0]
	if again.First != first.First {
		t.Fatalf("retry 2 minutes after the first answer got %d, first answer was %d: one fast clock wiped the 24 h window", again.First, first.First)
	}
}

// Snapshot bytes per kept key with a realistic caller (a certificate
// subject) and key (a UUID): the design says about 55 bytes each.
func TestH25ReviewKeyBytesWithRealisticCallers(t *testing.T) {
	f := sequencedFSM(t)
	const n = 20_000
	batch := make([]Claim, 0, 1000)
	for i := range n {
		batch = append(batch, Claim{Keyed: Keyed{
			Caller: fmt.Sprintf("CN=orders-writer-%d,OU=payments,O=Example Corp,C=US", i%64),
			Key:    fmt.Sprintf("%08x-1c2d-4e5f-8a9b-0c1d2e3f4a5b", i),
		}, Count: 1, First: uint64(1<<40 + i), Term: 1})
		if len(batch) == cap(batch) {
			claims(t, f, 1_700_000_000_000, batch...)
			batch = batch[:0]
		}
	}
	per := len(snapshotBytes(t, f)) / n
	t.Logf("snapshot bytes a key: %d; at the cap of %d keys: %d MB", per, MaxKeys, per*MaxKeys>>20)
	if per > 2*55 {
		t.Fatalf("a kept key costs %d bytes in a snapshot, not about 55 as design.md says (at the cap: %d MB, beyond the 10 MB snapshot budget)", per, per*MaxKeys>>20)
	}
}
