// Package leadership proves that a node still leads: the network side of
// a confirmation round (the leader's questions to the voters, and each
// voter's answers), and the voters' promises that let a leader answer
// from memory under a lease.
//
// It is readable without the rest of the server. It sees Raft, the node
// and its peers only through the small interfaces it declares (Raft,
// Node, StableStore); package server implements them and serves the
// Term RPC by calling Confirmer.AnswerTerms. Package sequencer decides
// when a round is needed and what it proves for the IDs it assigned
// (sequencer.Log.Confirm).
//
// # The term round
//
// Confirmer.Confirm proves that this node still leads in its current term,
// by a round of messages sent after the caller assigned its IDs: it asks
// other voters for their Raft term, as many as a majority still needs and
// more when some fail or are slow, and succeeds once a majority, counting
// itself, answers that it is still in this term.
//
// Why that is enough: a newer leader needs the votes of a majority, and a
// node that votes in a newer term stores that term first, and its term
// never goes down. Two majorities share a node. So if a newer leader had
// been elected before this round reached the majority that answered, one
// of them would have answered a higher term. A newer leader answers no
// request before it is elected; so none of its answers completed before
// the IDs being confirmed were assigned, and the order holds.
//
// Each answer must come from the voter it is counted for: the request
// names the node and the cluster, and a node answers only for itself, so
// whatever listens at a stale address cannot vote in this round.
//
// Unlike hashicorp/raft's VerifyLeader, no answer to a message sent before
// the call is counted: every answer here is to a request sent by this call.
//
// Which answers count, and when they decide a round, is one function,
// tally, of what the round knows: it starts no goroutine and reads no
// clock, so the rule reads, and is tested, as a table.
//
// # The lease
//
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
//     CLOCK_BOOTTIME on Linux (LeaseClock), which keeps counting while the
//     machine is suspended, so a suspended voter does not stretch its
//     promise; its absolute value, and the wall clock, do not matter.
//   - A process that stops (crash, kill) forgets its promises: so a node
//     confirms no leader, itself included, until the longest lease it may
//     have promised (recorded in its stable store before it can promise)
//     has passed since it started (Open).
//   - Membership changes one voter at a time (the server's
//     Node.changeMembership), each after a round in the current
//     configuration: the leader drops its own lease first
//     (sequencer.Sequencer.DropLease), and the round, which voters that
//     promised another leader hold back, waits out any other's. So a lease
//     is always counted in the newest configuration or the one before it,
//     whose majorities overlap any newer leader's.
//
// Who may make or undo a promise: a voter promises only the leader it
// knows, in its own term, as it stands when the promise is made (after any
// wait for another's to run out), so a deposed leader cannot keep renewing
// one and hold the next leader back; a release must come from a member (see
// Node.MayRelease), and one sent before a round of the same leader does
// not undo that round's promise, nor does that round, arriving after the
// release, get one.
//
// A leader that hands over leadership, or steps down, gives its lease up
// first (sequencer.Sequencer.EndLease, which also waits for the rounds
// that asked for one) and then releases the promises (Confirmer.Release),
// so the next leader need not wait them out; a leader
// that cannot release them (paused, cut off) makes the next one wait up to
// Lease.
package leadership
