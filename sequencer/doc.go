// Package sequencer hands out ticks on the leader, in one strict
// cluster-wide order: the core of Ordo, readable without Raft or gRPC.
//
// It owns the tick rule, reservations and their renewal, the lead bound,
// the batching of requests into confirmation rounds, and the leader's
// side of the lease (how long it may answer from memory). It does not own
// Raft, which it sees only through the Log interface it declares; the
// network side of a confirmation round, or the voters' promises that make
// a lease (both package leadership); or gRPC, and with it the
// encoding of ticks as IDs for the wire. Package server implements Log
// over Raft and drives a Sequencer from its leadership changes.
//
// # The order argument
//
// In short: "How it works" in README.md has it in a page, and "The order
// argument" in docs/design.md in full.
//
//  1. Every tick handed out lies below a reservation that was committed
//     before the tick was handed out, so it lies below the replicated
//     high-water mark from then on.
//  2. A new leader starts at the high-water mark its own first reservation
//     found (Reservation.Prev, computed after every earlier entry
//     applied), so it hands out only ticks no earlier leader could have.
//  3. Before answering, the leader asks a majority for their Raft term, in
//     messages sent after the ticks were assigned, and checks that they
//     are still in the term its reservation was committed in (Log.Confirm;
//     leadership.Confirmer.Confirm). A node that voted for a newer
//     leader has a higher term, so no newer leader had been elected, and
//     none could have answered any request, before these ticks were
//     assigned. A leader paused after assigning and resumed after a newer
//     leader answered gets a higher term back and never replies.
//
// The tick rule next = max(last+1, now) keeps IDs increasing when the wall
// clock moves back, without ever sleeping.
//
// # How far IDs run ahead of the clock
//
// A reservation reaches a window past the clock, or a stretch past the
// ticks it must cover when that is further (after a change of leader, or
// under more demand than the layout holds). A new leader starts at the
// mark it inherits and reserves from there, so leaders elected in quick
// succession push the time field ahead by what each reserves beyond it.
// So the stretch starts small, at the slack (a 64th of the window), and
// grows only with demand: four times the ticks handed out since the last
// renewal, at most a window. A leader hands out no tick past its lead
// ceiling (leadCeiling): its lead bound (MaxLeadTicks) past the highest
// clock reading it has seen, or the ceiling an earlier leader recorded
// with its reservations, if later. So no run of elections can carry the
// time field further than some leader's own bound from its own clock, and
// a leader restarted with a shorter window serves a mark reserved under
// a longer one; a request past the ceiling fails with ErrAhead.
package sequencer
