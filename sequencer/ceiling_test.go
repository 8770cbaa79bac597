package sequencer

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/layout"
)

// Every run of three leaders over one log, each of a reserve window from
// a short to a long one and a clock behind, level with or ahead of the
// others (standing still), each taking one ID or as many as its bound
// lets it (the adversary's run): no leader hands out a tick past the
// highest clockHigh+maxLead any leader so far had, however the windows
// and clocks combine (the ceiling does not ratchet), and a leader whose
// own bound is below the mark it inherits serves at once whenever the
// leaders before it left room under their ceiling (a window lowered
// across a restart is not an outage; before the ceiling, a 3 s leader
// after a 2 min one refused every call for about two minutes).
func TestLeadCeilingModel(t *testing.T) {
	l := layout.MustPreset("sonyflake") // 256 ticks per 10 ms: small numbers
	windows := []time.Duration{time.Second, 3 * time.Second, 30 * time.Second, 2 * time.Minute}
	offsets := []time.Duration{-20 * time.Second, 0, 20 * time.Second}
	type leader struct {
		window, offset time.Duration
		fill           bool
	}
	var choices []leader
	for _, w := range windows {
		for _, o := range offsets {
			for _, fill := range []bool{false, true} {
				choices = append(choices, leader{w, o, fill})
			}
		}
	}
	base := seqTestStart
	runs := 0
	for _, a := range choices {
		for _, b := range choices {
			for _, c := range choices {
				runs++
				run := []leader{a, b, c}
				log := newSeqFakeLog(1)
				t.Cleanup(func() { close(log.unblock) })
				var bound uint64 // the highest clockHigh+maxLead of any leader so far
				roomLeft := false
				for k, ld := range run {
					clock := &seqFakeClock{now: base.Add(ld.offset)}
					s := newSequencer(l, ld.window, clock.Now, log, hclog.NewNullLogger(), 1, Lease{})
					log.set(func(f *seqFakeLog) { f.term = uint64(k + 1) })
					if err := s.Lead(seqCtx(t), log.highWater()); err != nil {
						t.Fatalf("%v, leader %d: Lead: %v", run, k, err)
					}
					bound = max(bound, l.TickAt(clock.Now())+MaxLeadTicks(l, ld.window))
					b, err := s.Next(seqCtx(t), 1)
					switch {
					case err == nil:
					case errors.Is(err, ErrAhead) && !roomLeft:
					default:
						t.Fatalf("%v, leader %d (room left under the ceiling %v): first call: %v", run, k, roomLeft, err)
					}
					last := b.First
					if err == nil && ld.fill {
						st := s.State()
						room := st.ClockHigh + st.MaxLead - (st.Next - 1)
						for room > 0 {
							n := min(room, s.maxLead+1)
							got, err := s.Next(seqCtx(t), n)
							if err != nil {
								t.Fatalf("%v, leader %d: %d ticks of the %d its State says fit: %v", run, k, n, room, err)
							}
							last, room = got.First+got.Count-1, room-n
						}
						if _, err := s.Next(seqCtx(t), 1); !errors.Is(err, ErrAhead) {
							t.Fatalf("%v, leader %d: past the room its State gave: %v, want ErrAhead", run, k, err)
						}
					}
					if last > bound {
						t.Fatalf("%v, leader %d: tick %d handed out, %s past the highest bound any leader had",
							run, k, last, s.span(last-bound))
					}
					st := s.State()
					roomLeft = st.ClockHigh+st.MaxLead > st.Next-1
					s.Close()
				}
			}
		}
	}
	if runs != len(choices)*len(choices)*len(choices) {
		t.Fatalf("%d runs", runs)
	}
}

// A leader whose window is shorter than the one its mark was reserved
// under serves at once, and says so; a mark past every ceiling the
// cluster recorded (reserved by a version before the ceiling under a long
// window) is refused with a message that blames the mark, not demand.
func TestLoweredWindowServesAtOnce(t *testing.T) {
	h := newDefaultHarness(t, 2*time.Minute)
	h.lead(0)
	h.next(1)
	mark := h.log.highWater()
	if ahead := mark - h.now(); ahead < h.l.TicksIn(time.Minute) {
		t.Fatalf("the 2 min leader reserved only %s ahead", h.s.span(ahead))
	}
	h.window = 3 * time.Second
	h.newLeader(2)
	if b, err := h.s.Next(seqCtx(t), 1); err != nil {
		t.Fatalf("a 3 s leader after a 2 min one: %v, want IDs at once", err)
	} else if b.First < mark {
		t.Fatalf("tick %d below the inherited mark %d", b.First, mark)
	}
	// A backup records State's bound: it must count the inherited
	// ceiling, which this leader may reach, for a restore to start above.
	if st := h.s.State(); st.ClockHigh+st.MaxLead < mark {
		t.Fatalf("State says no tick past %d, below the mark %d it serves", st.ClockHigh+st.MaxLead, mark)
	}

	old := newDefaultHarness(t, 3*time.Second)
	mark = old.now() + old.l.TicksIn(time.Hour)
	old.log.set(func(f *seqFakeLog) { f.hw, f.markClock, f.clockHigh = mark, old.now(), old.now() })
	old.lead(mark)
	_, err := old.s.Next(seqCtx(t), 1)
	if !errors.Is(err, ErrAhead) {
		t.Fatalf("a mark an hour past every recorded ceiling: %v, want ErrAhead", err)
	}
	for _, want := range []string{"mark", "--reserve-window"} {
		if msg := fmt.Sprint(err); !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not name %q", msg, want)
		}
	}
}
