package settle

import (
	"context"
	"fmt"
	"time"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// request is one call waiting for the entry that carries it.
type request struct {
	ctx context.Context
	// reserve: count and ttl; a decision: track; IDs of a named
	// sequence: alloc; none: a read of W.
	count uint64
	// seq is the named sequence of a reserve, a read of W or a claim (""
	// for the default sequence); a decision's track names its own.
	seq string
	ttl time.Duration
	// key is a keyed reserve's, and anyTTL set when it named no TTL.
	key    fsm.Keyed
	anyTTL bool
	track  *fsm.Track
	alloc  *fsm.Alloc
	// claim: a keyed call (count ticks) of the default sequence, or of
	// named layout sequence seq, whose ticks (block, in term) came from
	// its window.
	claim *fsm.Keyed
	// window: the alloc raises this window's limit (windows.go).
	window *window

	done chan struct{}
	// The answer: the block and the term it was assigned in (reserve),
	// the outcome (a decision), W after the entry, or why not.
	block   sequencer.Block
	term    uint64
	outcome fsm.Outcome
	// allocated is what an alloc got.
	allocated fsm.Allocation
	settled   uint64
	err       error
}

func (r *request) finish(err error) {
	r.err = err
	close(r.done)
}

// Reservation is what Reserve answers.
type Reservation struct {
	sequencer.Block
	TTL time.Duration
	// Fate is FateOpen, except for a keyed Reserve's retry: where the
	// first call's reservation stands now (completed, abandoned, expired,
	// or FateUnknown once forgotten). Its handle still names it.
	Fate fsm.Fate
}

// Reserve hands out count ticks as one tracked reservation that lives ttl
// (0: the default), once its opening is committed.
func (s *Settler) Reserve(ctx context.Context, count uint64, ttl time.Duration) (Reservation, error) {
	return s.ReserveKeyed(ctx, fsm.Keyed{}, count, ttl)
}

// ReserveKeyed is Reserve with an idempotency key (none when key.Key is
// empty): the reservation is opened in the entry that keeps it under the
// key, and a call with a key that holds one answers that reservation, as
// first granted (ticks, count, TTL), with its fate now, and opens
// nothing. Another count, or another TTL when the call names one, is
// fsm.ErrKeyReused. A retry does not extend the reservation: Extend does.
func (s *Settler) ReserveKeyed(ctx context.Context, key fsm.Keyed, count uint64, ttl time.Duration) (Reservation, error) {
	return s.ReserveIn(ctx, "", key, count, ttl)
}

// ReserveIn is ReserveKeyed in sequence seq ("" for the default one). A
// named sequence's IDs are assigned by the entry that opens them, from
// the sequence's mark (fsm/seqtracking.go): its Reservation holds its
// values (dense) or ticks (layout), and a layout sequence's window is
// lifted past them before the answer. An unknown or dropped sequence is
// fsm.ErrNoSequence, IDs past what its kind holds fsm.ErrSequenceFull.
func (s *Settler) ReserveIn(ctx context.Context, seq string, key fsm.Keyed, count uint64, ttl time.Duration) (Reservation, error) {
	if count == 0 {
		// A request of no count is a read of W.
		return Reservation{}, fmt.Errorf("%w: count 0", sequencer.ErrBadCount)
	}
	anyTTL := ttl == 0
	if ttl == 0 {
		ttl = s.cfg.DefaultTTL
	}
	if ttl < time.Millisecond || ttl > s.cfg.MaxTTL {
		return Reservation{}, fmt.Errorf("%w: %s, the most this cluster allows is %s (--max-reservation-ttl)", ErrTTL, ttl, s.cfg.MaxTTL)
	}
	if seq != "" {
		if err := s.namedCheck(seq); err != nil {
			return Reservation{}, err
		}
	}
	if key.Key == "" && seq == "" {
		r, err := s.call(ctx, &request{count: count, ttl: ttl})
		if err != nil {
			return Reservation{}, err
		}
		return Reservation{Block: r.block, TTL: ttl, Fate: fsm.FateOpen}, nil
	}
	if err := s.keysVersion(); err != nil {
		return Reservation{}, err
	}
	r, err := s.call(ctx, &request{seq: seq, count: count, ttl: ttl, key: key, anyTTL: anyTTL && key.Key != ""})
	if err != nil {
		return Reservation{}, err
	}
	o := r.outcome
	return Reservation{Block: sequencer.Block{First: o.First, Count: o.Count}, TTL: ms(o.TTLMs), Fate: o.Fate}, nil
}

// Decide commits a Complete, Abandon or Extend (ttl 0: the default) of
// the reservation of count ticks from first, and returns its fate and W
// after it. A fate that refuses the call is an error too.
func (s *Settler) Decide(ctx context.Context, do fsm.Do, first, count uint64, ttl time.Duration) (fsm.Fate, uint64, error) {
	return s.DecideIn(ctx, "", do, first, count, ttl)
}

// DecideIn is Decide of a reservation of sequence seq ("" for the
// default one), whose W it answers. A dropped sequence's reservations are
// still decided; an unknown sequence is ErrUnknown (wrapping
// fsm.ErrNoSequence).
func (s *Settler) DecideIn(ctx context.Context, seq string, do fsm.Do, first, count uint64, ttl time.Duration) (fsm.Fate, uint64, error) {
	// Refused here, alone: in the entry, a Track the FSM refuses to decode
	// fails every call that shares it (an unknown one even stops every
	// node, as unreadable); an Open or Expire is the leader's to make.
	switch do {
	case fsm.DoComplete, fsm.DoAbandon, fsm.DoExtend:
	default:
		return 0, 0, fmt.Errorf("settle: a call completes, abandons or extends a reservation, not %q", do)
	}
	if first == 0 || count == 0 || first+count < first {
		return 0, 0, fmt.Errorf("%w: none holds %d ticks from tick %d", ErrUnknown, count, first)
	}
	if do == fsm.DoExtend {
		if ttl == 0 {
			ttl = s.cfg.DefaultTTL
		}
		if ttl < time.Millisecond || ttl > s.cfg.MaxTTL {
			return 0, 0, fmt.Errorf("%w: %s, the most this cluster allows is %s (--max-reservation-ttl)", ErrTTL, ttl, s.cfg.MaxTTL)
		}
	}
	if seq != "" {
		if err := s.namedCheck(seq); err != nil {
			return 0, 0, err
		}
	}
	tr := fsm.Track{Do: do, Seq: seq, First: first, Count: count, TTLMs: ttl.Milliseconds()}
	r, err := s.call(ctx, &request{seq: seq, track: &tr})
	if err != nil {
		return 0, 0, err
	}
	o := r.outcome
	if o.Err != nil {
		return 0, r.settled, fmt.Errorf("%w: %w", ErrUnknown, o.Err)
	}
	return o.Fate, r.settled, refusal(do, o.Fate, first, count)
}

// refusal is the error a fate makes of a call, nil when the call did what
// it asked (or a retry of it finds it done).
func refusal(do fsm.Do, f fsm.Fate, first, count uint64) error {
	switch {
	case f == fsm.FateUnknown:
		return fmt.Errorf("%w: none holds ticks %d to %d", ErrUnknown, first, first+count-1)
	case do == fsm.DoAbandon && f == fsm.FateExpired:
		return nil // given up either way: nothing may publish them
	case f == fsm.FateExpired:
		return ErrExpired
	case f == fsm.FateAbandoned && do != fsm.DoAbandon:
		return ErrAbandoned
	case f == fsm.FateCompleted && do != fsm.DoComplete:
		return ErrCompleted
	}
	return nil
}

// Claim hands out count ticks of the default sequence for a keyed call,
// once the entry that records them under the key is committed: the ticks
// the key holds when a call with it was answered before (its retry gets
// them again), else new ones. Grants of one ask, waited for; unkeyed
// calls take Next's path.
func (s *Settler) Claim(ctx context.Context, key fsm.Keyed, count uint64) (uint64, error) {
	return s.wait(ctx, s.Grants(ctx, []Ask{{Count: count, Key: key}})[0])
}

// namedCheck refuses a call about named sequence seq before it is
// queued: before the cluster reads named sequences, and for a malformed
// name (which the FSM would refuse with the whole entry, failing every
// call that shares it).
func (s *Settler) namedCheck(seq string) error {
	if err := s.keysVersion(); err != nil {
		return err
	}
	return fsm.CheckSequenceName(seq)
}

// keysVersion refuses keyed and sequence calls before the cluster reads
// them.
func (s *Settler) keysVersion() error {
	if v := s.state.ClusterVersion(); v < fsm.SequencesVersion {
		return fmt.Errorf("%w: it is %d, named sequences and idempotency keys need %d, which the leader records once every voter reports that it runs an Ordo that reads it (ordo status shows each node's): upgrade every node",
			ErrClusterVersion, v, fsm.SequencesVersion)
	}
	return nil
}

// Alloc hands out count IDs (values or ticks) of named sequence seq and
// returns the first: Grants of one ask, waited for. With a key, a retry
// gets the first call's IDs.
func (s *Settler) Alloc(ctx context.Context, seq string, count uint64, key fsm.Keyed) (uint64, error) {
	def, ok := s.state.Sequence(seq)
	if !ok || def.Dropped {
		def = fsm.Sequence{} // the log refuses it
	}
	return s.wait(ctx, s.Grants(ctx, []Ask{{Name: seq, Seq: &def, Count: count, Key: key}})[0])
}

// wait waits for g's result.
func (s *Settler) wait(ctx context.Context, g Grant) (uint64, error) {
	select {
	case <-g.Done():
		return g.Result()
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-s.stop:
		return 0, sequencer.ErrNotLeader
	}
}

// Watermark returns W after every call that completed before this one
// began: read from state committed in this leader's term, either by an
// entry this call waited for (when the frontier moved or decisions were
// pending) or after a confirmation round.
func (s *Settler) Watermark(ctx context.Context) (uint64, error) {
	return s.WatermarkOf(ctx, "")
}

// WatermarkOf is Watermark of sequence seq ("" for the default one), in
// its own values or ticks: read, as the default's is, from state
// committed in this leader's term after every call that completed before
// this one began. A dropped sequence keeps its W; an unknown one is
// fsm.ErrNoSequence.
func (s *Settler) WatermarkOf(ctx context.Context, seq string) (uint64, error) {
	if seq != "" {
		if err := s.namedCheck(seq); err != nil {
			return 0, err
		}
		if _, ok := s.state.SequenceSettled(seq); !ok {
			return 0, fmt.Errorf("%w: %q: create it with ordo sequence create", fsm.ErrNoSequence, seq)
		}
	}
	r, err := s.call(ctx, &request{seq: seq})
	if err != nil {
		// r may still be answered: its fields are not ours to read.
		return 0, err
	}
	return r.settled, nil
}

// settledOf is the W a read of seq answers after an entry that did res
// applied: the entry's own for the default sequence and for a named one
// it touched, else the state's now (at least as new, committed too).
func (s *Settler) settledOf(seq string, res fsm.Result) uint64 {
	if seq == "" {
		return res.Settled
	}
	if w, ok := res.SeqSettled[seq]; ok {
		return w
	}
	w, _ := s.state.SequenceSettled(seq)
	return w
}

// call queues r for the next entry and waits for its answer.
func (s *Settler) call(ctx context.Context, r *request) (*request, error) {
	if err := s.enqueue(ctx, r); err != nil {
		return r, err
	}
	select {
	case <-r.done:
		return r, r.err
	case <-ctx.Done():
		return r, ctx.Err()
	case <-s.stop:
		return r, sequencer.ErrNotLeader
	}
}

// enqueue queues r for the next entry; r.done closes once it is
// answered.
func (s *Settler) enqueue(ctx context.Context, r *request) error {
	if err := s.versionErr(); err != nil {
		return err
	}
	r.ctx, r.done = ctx, make(chan struct{})
	select {
	case s.queue <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return sequencer.ErrNotLeader
	}
}

// versionErr refuses while the cluster's version does not allow settle
// entries.
func (s *Settler) versionErr() error {
	if v := s.state.ClusterVersion(); v < fsm.SettleVersion {
		return fmt.Errorf("%w: it is %d, they need %d, which the leader records once every voter reports that it runs an Ordo that reads it (ordo status shows each node's): upgrade every node",
			ErrClusterVersion, v, fsm.SettleVersion)
	}
	return nil
}

// run gathers the calls that arrive together, and the expiries that fall
// due, into one entry at a time.
func (s *Settler) run() {
	defer s.wg.Done()
	defer close(s.flights)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var batch []*request
		select {
		case <-s.stop:
			s.failQueued()
			return
		case r := <-s.queue:
			batch = s.gather(r)
		case <-timer.C:
		case <-s.wake:
		}
		next := s.flush(batch)
		timer.Reset(next)
	}
}

// gather takes r and whatever else is queued, up to maxBatch.
func (s *Settler) gather(r *request) []*request {
	batch := []*request{r}
	for len(batch) < maxBatch {
		select {
		case r := <-s.queue:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

func (s *Settler) failQueued() {
	for {
		select {
		case r := <-s.queue:
			r.finish(sequencer.ErrNotLeader)
		default:
			return
		}
	}
}

// flight is a proposed entry and the calls it answers.
type flight struct {
	pending Pending
	term    uint64
	tracks  []fsm.Track
	// owners[i] is the call track i answers; nil for an expiry.
	owners []*request
	reads  []*request
	// allocs are the named sequences' calls, allocOwners who asked.
	allocs      []fsm.Alloc
	allocOwners []*request
	// claims are keyed calls of the default sequence, claimOwners who
	// asked.
	claims      []fsm.Claim
	claimOwners []*request
	// vouch is what the answers wait for besides the commit (IDs.Vouch).
	vouch sequencer.Ticket
	// namedOpens says a track opens a named sequence's reservation, whose
	// IDs the entry's clock decides (a layout sequence's).
	namedOpens bool
}

// flush proposes one entry for batch and the expiries due, or, when there
// is nothing to commit, confirms leadership for the reads of W. It
// returns how long until the next expiry is due.
func (s *Settler) flush(batch []*request) time.Duration {
	// No settle entry before the cluster reads them, not even a frontier
	// with no call waiting: a node of an older version stops at one, and
	// a rejected entry would fail and wake this loop again and again.
	if err := s.versionErr(); err != nil {
		for _, r := range batch {
			r.finish(err)
		}
		return time.Hour
	}
	s.mu.Lock()
	leading := s.leading
	expiries, nextDue := s.dueLocked(s.clock())
	s.mu.Unlock()
	if !leading {
		for _, r := range batch {
			r.finish(sequencer.ErrNotLeader)
		}
		return time.Hour
	}
	if len(batch) == 0 && len(expiries) == 0 {
		return untilDue(nextDue, s.clock()) // woken with nothing to do
	}
	// The calls before the expiries judged after they arrived: a
	// Complete that reached this leader before the deadline wins.
	var f flight
	for _, r := range batch {
		s.add(&f, r)
	}
	f.tracks = append(f.tracks, expiries...)
	f.owners = append(f.owners, make([]*request, len(expiries))...)
	next, term := s.ids.Frontier()
	if term == 0 {
		s.fail(f, sequencer.ErrNotLeader)
		return untilDue(nextDue, s.clock())
	}
	f.term = term
	if len(f.tracks) == 0 && len(f.allocs) == 0 && len(f.claims) == 0 && next <= s.frontier() {
		s.confirmReads(f.reads, term)
		return untilDue(nextDue, s.clock())
	}
	f.vouch = s.ids.Vouch()
	c := fsm.Command{Op: fsm.OpSettle, Tracks: f.tracks, Frontier: next, Allocs: f.allocs, Claims: f.claims}
	if len(f.allocs)+len(f.claims) > 0 || f.namedOpens {
		c.NowMs = s.wall().UnixMilli() // what layout sequences follow
	}
	f.pending = s.log.Settle(c)
	select {
	case s.flights <- f:
	case <-s.stop:
		s.fail(f, sequencer.ErrNotLeader)
	}
	return untilDue(nextDue, s.clock())
}

// add puts r into f: a reserve assigns its ticks now, in this loop, so
// the entry's frontier, read after, covers them.
func (s *Settler) add(f *flight, r *request) {
	switch {
	case r.alloc != nil:
		f.allocs, f.allocOwners = append(f.allocs, *r.alloc), append(f.allocOwners, r)
	case r.claim != nil && r.seq != "":
		// A named sequence's: assigned from its window (Grants).
		f.claims = append(f.claims, fsm.Claim{Keyed: *r.claim, Seq: r.seq, Count: r.block.Count, First: r.block.First, Term: r.term})
		f.claimOwners = append(f.claimOwners, r)
	case r.claim != nil:
		// Assigned here, like a reservation's, so the frontier covers
		// them; no round: the commit in this term proves this leader.
		b, term, err := s.ids.AssignTracked(r.ctx, r.count)
		if err != nil {
			r.finish(err)
			return
		}
		r.block, r.term = b, term
		f.claims = append(f.claims, fsm.Claim{Keyed: *r.claim, Count: b.Count, First: b.First, Term: term})
		f.claimOwners = append(f.claimOwners, r)
	case r.track != nil:
		f.tracks, f.owners = append(f.tracks, *r.track), append(f.owners, r)
	case r.count > 0:
		if !s.openOne(r) {
			return
		}
		if r.seq != "" {
			// The FSM assigns its IDs from the sequence's mark.
			tr := fsm.Track{Do: fsm.DoOpen, Seq: r.seq, Count: r.count, TTLMs: r.ttl.Milliseconds(), Keyed: r.key, AnyTTL: r.anyTTL}
			f.tracks, f.owners, f.namedOpens = append(f.tracks, tr), append(f.owners, r), true
			return
		}
		b, term, err := s.ids.AssignTracked(r.ctx, r.count)
		if err != nil {
			s.mu.Lock()
			s.opening--
			s.mu.Unlock()
			r.finish(err)
			return
		}
		r.block, r.term = b, term
		tr := fsm.Track{Do: fsm.DoOpen, First: b.First, Count: b.Count, TTLMs: r.ttl.Milliseconds()}
		if r.key.Key != "" {
			// The FSM opens it only when the key holds no reservation,
			// and only from an entry of this term; these ticks are then
			// nobody's, below the frontier.
			tr.Keyed, tr.Term, tr.AnyTTL = r.key, term, r.anyTTL
		}
		f.tracks, f.owners = append(f.tracks, tr), append(f.owners, r)
	default:
		f.reads = append(f.reads, r)
	}
}

// openOne counts r as an open reservation proposed, unless MaxOpen (of
// every sequence together) is reached, which fails r.
func (s *Settler) openOne(r *request) bool {
	s.mu.Lock()
	full := len(s.clocks)+s.opening >= s.cfg.MaxOpen
	if !full {
		s.opening++
	}
	s.mu.Unlock()
	if full {
		r.finish(fmt.Errorf("%w: %d are open, the most this cluster allows (--max-open-reservations); complete or abandon some", ErrTooManyOpen, s.cfg.MaxOpen))
		return false
	}
	return true
}

// frontier is the frontier of the last entry applied, as W's state holds
// it.
func (s *Settler) frontier() uint64 {
	_, f := s.state.Marks()
	return f
}

func untilDue(at, now time.Time) time.Duration {
	if at.IsZero() {
		return time.Hour
	}
	return max(at.Sub(now), time.Millisecond)
}

// confirmReads answers reads of W when nothing needs committing: W is
// read after a round that started after they arrived proves this node
// still led.
func (s *Settler) confirmReads(reads []*request, term uint64) {
	if len(reads) == 0 {
		return
	}
	go func() {
		err := s.ids.Confirm(context.Background())
		w, _ := s.state.Marks()
		if _, t := s.ids.Frontier(); err == nil && t != term {
			err = fmt.Errorf("%w: leadership changed during the round", sequencer.ErrNotLeader)
		}
		for _, r := range reads {
			r.settled = w
			if r.seq != "" {
				r.settled, _ = s.state.SequenceSettled(r.seq)
			}
			r.finish(err)
		}
	}()
}

// results answers each proposed entry's calls, in log order, and keeps
// the deadlines in step with what the entry did.
func (s *Settler) results() {
	defer s.wg.Done()
	for f := range s.flights {
		res, err := s.result(f.pending)
		if err == nil && res.Err == nil && (len(res.Outcomes) != len(f.tracks) || len(res.Allocations) != len(f.allocs) || len(res.Claimed) != len(f.claims)) {
			err = fmt.Errorf("settle entry answered %d outcomes for %d tracks", len(res.Outcomes), len(f.tracks))
		}
		if err == nil {
			err = res.Err
		}
		if err != nil {
			s.logger.Warn("settle entry failed", "tracks", len(f.tracks), "error", err)
			s.fail(f, err)
			continue
		}
		s.applied(f, res)
	}
}

// result waits for a proposed entry's result, or for Close: a log that
// never answers (no quorum, a stalled disk) must not hold Close, and so
// the node's shutdown, for ever.
func (s *Settler) result(p Pending) (fsm.Result, error) {
	type answer struct {
		res fsm.Result
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := p.Result()
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		return a.res, a.err
	case <-s.stop:
		return fsm.Result{}, sequencer.ErrNotLeader
	}
}

// applied updates the deadlines from an entry's outcomes and answers its
// calls.
func (s *Settler) applied(f flight, res fsm.Result) {
	// A dense sequence's IDs are decided by the log alone: whoever
	// committed the entry, a call that ended before this one began is
	// earlier in it, and an older leader answers none from memory. So
	// they need no round, even under the lease: failing them would be a
	// gap the cluster made. (A layout sequence's keyed call is a claim of
	// its window's ticks, answered below after the vouch: under the lease
	// an older leader may still answer from its window until this
	// leader's round or lease proves it ended; its key keeps the IDs, so
	// failing it is no gap.)
	for i, r := range f.allocOwners {
		r.allocated = res.Allocations[i]
		if r.window != nil {
			s.installWindow(r, res.Term)
		} else {
			s.passWindow(r.alloc.Seq, r.allocated, r.alloc.Count)
		}
		r.finish(nil)
	}
	f.allocOwners = nil
	// A named sequence's reservation took its IDs from the mark, as an
	// Alloc does: its window's cursor is lifted past them before any
	// answer, so no call that begins after it is answered gets IDs below
	// them.
	for i, tr := range f.tracks {
		if o := res.Outcomes[i]; tr.Seq != "" && tr.Do == fsm.DoOpen && o.Err == nil && o.Count > 0 {
			s.passWindow(tr.Seq, fsm.Allocation{First: o.First}, o.Count)
		}
	}
	vouched := s.vouched(f.vouch)
	now := s.clock()
	s.mu.Lock()
	for i, tr := range f.tracks {
		s.account(tr, res.Outcomes[i], now)
	}
	if vouched == nil {
		s.publishLocked(res.Settled, res.SeqSettled)
	}
	s.mu.Unlock()
	if vouched != nil {
		s.answer(f, vouched)
		return
	}
	for i, r := range f.owners {
		if r == nil {
			continue
		}
		r.outcome, r.settled = res.Outcomes[i], s.settledOf(f.tracks[i].Seq, res)
		var err error
		if r.count > 0 && (r.key.Key != "" || r.seq != "") {
			// Keyed: the FSM decided, and refused new ticks from another
			// term (fsm.ErrClaimTerm); a reservation its key held was so
			// committed when first answered. A named sequence's: the FSM
			// assigned its IDs in log order, so any term's commit will do,
			// as for an Alloc.
			err = res.Outcomes[i].Err
		} else if r.count > 0 && res.Term != r.term {
			// Opened in another term than the ticks were assigned in:
			// nothing proves no newer leader answered meanwhile. The
			// reservation expires unanswered.
			err = fmt.Errorf("%w: reservation committed in term %d, assigned in term %d", sequencer.ErrNotLeader, res.Term, r.term)
		} else if r.count > 0 && res.Outcomes[i].Err != nil {
			err = res.Outcomes[i].Err
		}
		r.finish(err)
	}
	for _, r := range f.reads {
		r.settled = s.settledOf(r.seq, res)
		var err error
		if res.Term != f.term {
			err = fmt.Errorf("%w: W read in term %d, asked in term %d", sequencer.ErrNotLeader, res.Term, f.term)
		}
		r.finish(err)
	}
	// A keyed call's new ticks were assigned without a round: the FSM
	// keeps and answers them only from an entry committed in the term
	// they were assigned in (fsm.ErrClaimTerm, which the client retries),
	// as a reservation's; a kept answer was so committed when first given.
	for i, r := range f.claimOwners {
		r.allocated = res.Claimed[i]
		r.finish(nil)
	}
	for _, r := range f.allocOwners {
		r.finish(nil)
	}
}

// vouched waits for t (IDs.Vouch), or for Close.
func (s *Settler) vouched(t sequencer.Ticket) error {
	select {
	case <-t.Done():
		return t.Err()
	case <-s.stop:
		return sequencer.ErrNotLeader
	}
}

// answer fails every call of f with err.
func (s *Settler) answer(f flight, err error) {
	for _, r := range f.owners {
		if r != nil {
			r.finish(err)
		}
	}
	for _, r := range f.reads {
		r.finish(err)
	}
	for _, r := range f.allocOwners {
		r.finish(err)
	}
	for _, r := range f.claimOwners {
		r.finish(err)
	}
}

// account keeps the deadlines in step with one Track's outcome.
func (s *Settler) account(tr fsm.Track, o fsm.Outcome, now time.Time) {
	if tr.Do == fsm.DoOpen {
		s.opening--
		if !o.Changed {
			// Refused, or a keyed retry that opened nothing: the
			// reservation it answers keeps its own deadline.
			return
		}
		s.stats.Reserved++
		// A named sequence's open learns its IDs from the outcome.
		tr.First, tr.Count = o.First, o.Count
	}
	if !s.leading || o.Err != nil {
		return
	}
	if o.Fate == fsm.FateOpen {
		// An Expire that finds it open was judged before an Extend,
		// whose own outcome set the new deadline.
		if tr.Do == fsm.DoOpen || tr.Do == fsm.DoExtend {
			s.setDeadlineLocked(deadline{at: now.Add(ms(tr.TTLMs)), seq: tr.Seq, first: tr.First, count: tr.Count, ext: o.Ext})
		}
		return
	}
	// Counted only when this track closed it: a retry finds it closed.
	if o.Changed {
		switch o.Fate {
		case fsm.FateExpired:
			s.stats.Expired++
		case fsm.FateAbandoned:
			s.stats.Abandoned++
		case fsm.FateCompleted:
			s.stats.Completed++
		}
	}
	delete(s.clocks, resKey{tr.Seq, tr.First})
}

// fail answers every call of f with err. Expiries it carried are judged
// again at once: the entry may not have committed. Not one whose
// reservation has a deadline again: an Extend applied since the Expire
// was judged set it, and the Expire, judged on the extension count before,
// would now be a no-op that leaves the reservation without any deadline.
func (s *Settler) fail(f flight, err error) {
	now := s.clock()
	s.mu.Lock()
	for i, tr := range f.tracks {
		switch {
		case tr.Do == fsm.DoOpen:
			s.opening--
		case f.owners[i] == nil && s.leading:
			if _, ok := s.clocks[resKey{tr.Seq, tr.First}]; !ok {
				// Not at once: a leader whose sequencer stopped serving
				// fails every entry until it leads again, and would spin.
				s.setDeadlineLocked(deadline{at: now.Add(retryDelay), seq: tr.Seq, first: tr.First, count: tr.Count, ext: tr.Ext})
			}
		}
	}
	s.mu.Unlock()
	s.wakeUp()
	s.answer(f, err)
}
