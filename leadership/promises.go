package leadership

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// leaseRecordKey is where a node records, in Raft's stable store, the
// longest lease it may have promised, before it may promise it: a node
// that restarts waits that long before it confirms any leader.
var leaseRecordKey = []byte("ordo_lease_ns")

// promises is what this node has promised as a voter: to confirm no
// leader but `to` until `until`, on LeaseClock. After a restart it holds
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
//
// stillLeads is asked again at the moment of the promise, not only when
// the caller decided to ask for one: the wait can last a lease, and a node
// that left leader's term meanwhile must not promise it, or the leader of
// the newer term would wait that promise out. Promising less is always
// safe: a promise only restrains this node.
func (p *promises) confirm(ctx context.Context, leader string, term, round uint64, ask time.Duration, stillLeads func() bool) (time.Duration, error) {
	for {
		p.mu.Lock()
		now := p.clock()
		if now >= p.until || (p.to == leader && leader != "") {
			granted := min(ask, p.lease)
			if r := p.released; leader == r.leader && (term < r.term || (term == r.term && round < r.round)) {
				granted = 0
			}
			if granted > 0 && !stillLeads() {
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

// leaseClockStart is what LeaseClock counts from on systems without
// CLOCK_BOOTTIME.
var leaseClockStart = time.Now()

// openPromises reads the longest lease this node may have promised before
// it last stopped, from Raft's stable store, and holds every confirmation
// back until that long has passed. Before this node may promise a longer
// lease than recorded, it records it, so a crash at any point is covered.
func openPromises(store StableStore, lease time.Duration, logger hclog.Logger) (*promises, error) {
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
	return newPromises(LeaseClock, lease, hold), nil
}
