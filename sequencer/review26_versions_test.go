package sequencer

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/layout"
)

// review26VersionedLog is a fake Log whose cluster may still hold voters
// of a version before the lead ceiling (RecordsCeilings false), as a
// cluster does until its version is raised.
type review26VersionedLog struct {
	*seqFakeLog
	ceilings atomic.Bool
}

func (v *review26VersionedLog) RecordsCeilings() bool { return v.ceilings.Load() }

func (v *review26VersionedLog) recorded() uint64 {
	var r uint64
	v.set(func(f *seqFakeLog) { r = f.clockHigh })
	return r
}

// Review 26, mixed versions. A version before the ceiling reads a
// reservation's reading as a clock reading and adds its own lead bound
// to it. While such a node may lead (a rolling upgrade, before the
// cluster version is raised), a leader of a window over 5 s must not
// record its ceiling less 10 s: an old leader of the same window would
// then hand out ticks twice its bound less 10 s past the clock, past the
// highest clockHigh+maxLead any leader had, and past what a restore's
// margin counts. Once every voter reads ceilings, the leader records its
// ceiling without waiting for a renewal half a window away, so a leader
// of a shorter window after it still serves at once.
func TestReview26EarlierVersionsReadNoCeiling(t *testing.T) {
	l := layout.MustPreset("default")
	const window = 30 * time.Second
	log := &review26VersionedLog{seqFakeLog: newSeqFakeLog(1)}
	t.Cleanup(func() { close(log.unblock) })
	clock := &seqFakeClock{now: seqTestStart}
	s := newSequencer(l, window, clock.Now, log, hclog.NewNullLogger(), 1, Lease{})
	defer s.Close()
	if err := s.Lead(seqCtx(t), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(seqCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	now := l.TickAt(clock.Now())
	lead := MaxLeadTicks(l, window)
	bound := now + lead // the highest clockHigh+maxLead any leader had
	// An earlier version's leader of the same window, its clock level
	// with this one's: its lead bound past the highest reading it knows,
	// the log's among them.
	if old := max(now, log.recorded()) + lead; old > bound {
		t.Fatalf("an earlier version's leader reads the recorded %d as a clock reading and may hand out up to %d, %s past the highest bound any leader had (%d)",
			log.recorded(), old, s.span(old-bound), bound)
	}

	// The cluster version is raised: the ceiling is recorded at once.
	log.ceilings.Store(true)
	want := bound - l.TicksIn(minMaxLead)
	eventually.True(t, seqTestWait, "the leader to record its ceiling", func() bool {
		s.RenewIfLow()
		return log.recorded() >= want
	})
	if got := log.recorded(); got != want {
		t.Fatalf("recorded %d, want the ceiling less 10 s, %d", got, want)
	}
	// A leader of a shorter window, its clock level, serves the mark.
	short := newSequencer(l, 3*time.Second, clock.Now, log, hclog.NewNullLogger(), 1, Lease{})
	defer short.Close()
	log.set(func(f *seqFakeLog) { f.term = 2 })
	if err := short.Lead(seqCtx(t), log.highWater()); err != nil {
		t.Fatal(err)
	}
	if _, err := short.Next(seqCtx(t), 1); err != nil {
		t.Fatalf("a 3 s leader after the 30 s one recorded its ceiling: %v", err)
	}
}
