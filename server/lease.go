package server

// The lease (Config.Lease, off by default) lets a leader answer from
// memory, with no round per request, while a majority has promised to
// confirm no other leader.
//
// The argument. A voter's answer to a round that asks for a lease is also
// a promise: until Lease has passed on its own clock since it answered, it
// answers no other leader's round and does not count itself in its own
// (promises.confirm holds them back). The leader counts a majority's
// promises from the moment it sent the round, before any of them was made,
// less a drift margin (a tenth; package sequencer takes it off), and
// serves a request from memory only if, after assigning its IDs, the lease
// still holds. A newer leader serves nothing before a majority confirms
// it, and that majority shares a voter with the one that promised; that
// voter confirms it only after its promise ran out, which is after the old
// leader's lease ended. So every ID the old leader handed out under its
// lease was assigned before the newer leader answered anyone, and lies
// below the mark the newer leader starts from: the order holds as with the
// term round.
//
// What it assumes, beyond what the term round does:
//   - Clocks run at nearly the same rate: over one lease, no node's clock
//     runs more than a tenth slower than another's. The clock is
//     CLOCK_BOOTTIME on Linux, which keeps counting while the machine is
//     suspended, so a suspended voter does not stretch its promise; its
//     absolute value, and the wall clock, do not matter.
//   - A process that stops (crash, kill) forgets its promises: so a node
//     confirms no leader, itself included, until the longest lease it may
//     have promised (recorded in its stable store before it can promise)
//     has passed since it started.
//   - Membership changes one voter at a time (Node.changeMembership),
//     each after a round in the current configuration: the leader drops
//     its own lease first (sequencer.Sequencer.DropLease), and the round,
//     which voters that promised another leader hold back, waits out any
//     other's. So a lease is always counted in the newest configuration
//     or the one before it, whose majorities overlap any newer leader's.
//
// Who may make or undo a promise: a voter promises only the leader it
// knows, in its own term, so a deposed leader cannot keep renewing one and
// hold the next leader back; a release must come from a member (see
// Node.mayRelease), and one sent before a round of the same leader does
// not undo that round's promise, nor does that round, arriving after the
// release, get one.
//
// A leader that hands over leadership, or steps down, gives its lease up
// first (sequencer.Sequencer.EndLease) and then releases the promises, so
// the next leader need not wait them out; a leader that cannot release
// them (paused, cut off) makes the next one wait up to Lease.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// leaseRecordKey is where a node records, in Raft's stable store, the
// longest lease it may have promised, before it may promise it: a node
// that restarts waits that long before it confirms any leader.
var leaseRecordKey = []byte("ordo_lease_ns")

// promises is what this node has promised as a voter: to confirm no
// leader but `to` until `until`, on leaseClock. After a restart it holds
// everyone back (to is empty) until the recorded longest lease passed.
type promises struct {
	clock func() time.Duration
	// lease is the longest promise this node gives; 0: it gives none.
	lease time.Duration

	mu    sync.Mutex
	to    string
	until time.Duration
	// term and round are the newest term and round the promise was given
	// in: a release from before them (late, or from before a restart of
	// the leader) must not take back a promise the leader counts on.
	term, round uint64
	// released is the newest release: a round of that leader from before
	// it (sent before the release but come after it) gets no promise, so
	// the next leader need not wait it out.
	released struct {
		leader      string
		term, round uint64
	}
	// changed is closed and replaced whenever a promise is released, so
	// that a held answer looks again.
	changed chan struct{}
}

func newPromises(clock func() time.Duration, lease, restartHold time.Duration) *promises {
	p := &promises{clock: clock, lease: lease, changed: make(chan struct{})}
	if restartHold > 0 {
		p.until = clock() + restartHold
	}
	return p
}

// confirm waits until this node may confirm leader (no promise to anyone
// else holds), then promises it min(ask, the node's own lease) for the
// round it asked in (term, round), and returns that promise (0: none).
// The promise starts before the caller answers, so it never ends before
// the leader's count of it does. It gives up when ctx ends.
func (p *promises) confirm(ctx context.Context, leader string, term, round uint64, ask time.Duration) (time.Duration, error) {
	for {
		p.mu.Lock()
		now := p.clock()
		if now >= p.until || (p.to == leader && leader != "") {
			granted := min(ask, p.lease)
			if r := p.released; leader == r.leader && (term < r.term || (term == r.term && round < r.round)) {
				granted = 0
			}
			if granted > 0 {
				if now >= p.until || p.to != leader {
					p.until, p.term, p.round = 0, 0, 0 // the old promise ran out
				}
				p.to, p.until = leader, max(p.until, now+granted)
				if term > p.term || (term == p.term && round > p.round) {
					p.term, p.round = term, round
				}
			}
			p.mu.Unlock()
			return granted, nil
		}
		wait, changed := p.until-now, p.changed
		p.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-changed:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		}
	}
}

// release forgets the promise to leader, if that is the one held and it
// was given before the release was sent: in a term no newer than term
// and, in term, in a round before round.
func (p *promises) release(leader string, term, round uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.released; leader != "" && (leader != r.leader || term > r.term || (term == r.term && round > r.round)) {
		p.released.leader, p.released.term, p.released.round = leader, term, round
	}
	if leader == "" || p.to != leader || p.term > term || (p.term == term && p.round >= round) {
		return
	}
	p.to, p.until, p.term, p.round = "", 0, 0, 0
	close(p.changed)
	p.changed = make(chan struct{})
}

// leaseClockStart is what leaseClock counts from on systems without
// CLOCK_BOOTTIME.
var leaseClockStart = time.Now()

// openPromises reads the longest lease this node may have promised before
// it last stopped, from Raft's stable store, and holds every confirmation
// back until that long has passed. Before this node may promise a longer
// lease than recorded, it records it, so a crash at any point is covered.
func openPromises(store raft.StableStore, lease time.Duration, logger hclog.Logger) (*promises, error) {
	recorded, err := store.GetUint64(leaseRecordKey)
	if errors.Is(err, raftboltdb.ErrKeyNotFound) {
		recorded, err = 0, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the recorded lease: %w", err)
	}
	if lease > time.Duration(recorded) {
		if err := store.SetUint64(leaseRecordKey, uint64(lease)); err != nil {
			return nil, fmt.Errorf("record the lease: %w", err)
		}
	}
	hold := max(lease, time.Duration(recorded))
	if hold > 0 {
		logger.Info("confirming no leader until the longest lease this node may have promised has passed", "hold", hold)
	}
	return newPromises(leaseClock, lease, hold), nil
}
