package verify

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/layout"
)

// fakeSettled is a one-node stand-in for the settled order, each call
// under one lock, so it is linearizable: W is the oldest open
// reservation, or the next tick when none is open, and a reservation
// expires once its TTL has passed. Told to, it breaks one property.
type fakeSettled struct {
	api.UnimplementedSequencerServer
	lay layout.Layout
	// breaks is "" (correct), "early" (W answers the next tick, passing
	// open reservations), "down" (every fifth read answers one less) or
	// "below" (W answers past ticks not yet handed out).
	breaks string

	mu    sync.Mutex
	next  uint64 // the next tick to hand out
	open  map[uint64]fakeReservation
	reads int
}

type fakeReservation struct {
	count    uint64
	deadline time.Time
}

func newFakeSettled(t *testing.T, breaks string) *fakeSettled {
	lay, err := layout.Parse("default")
	if err != nil {
		t.Fatal(err)
	}
	return &fakeSettled{lay: lay, breaks: breaks, next: 1, open: map[uint64]fakeReservation{}}
}

// expireLocked closes the reservations whose TTL has passed.
func (f *fakeSettled) expireLocked() {
	now := time.Now()
	for first, r := range f.open {
		if now.After(r.deadline) {
			delete(f.open, first)
		}
	}
}

func (f *fakeSettled) Reserve(_ context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	first, n := f.next, uint64(req.Count)
	f.next += n
	f.open[first] = fakeReservation{count: n, deadline: time.Now().Add(time.Duration(req.TtlMs) * time.Millisecond)}
	var runs []*api.IDRun
	for tick := first; tick < first+n; tick++ {
		runs = append(runs, &api.IDRun{First: f.lay.ID(tick, 0), Count: 1, Step: 1})
	}
	return &api.ReserveResponse{Handle: api.Handle{First: first, Count: n}.String(), Runs: runs, TtlMs: req.TtlMs}, nil
}

// decide is a Complete (want COMPLETED), Abandon or Extend of handle.
func (f *fakeSettled) decide(handle string, want api.Fate, ttlMs uint32) (*api.SettleResponse, error) {
	h, err := api.ParseHandle(handle)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expireLocked()
	if _, isOpen := f.open[h.First]; !isOpen {
		if want == api.Fate_FATE_ABANDONED {
			return &api.SettleResponse{Fate: api.Fate_FATE_EXPIRED}, nil
		}
		return nil, status.Error(codes.FailedPrecondition, "reservation expired: do not publish these IDs")
	}
	if want == api.Fate_FATE_OPEN {
		f.open[h.First] = fakeReservation{count: h.Count, deadline: time.Now().Add(time.Duration(ttlMs) * time.Millisecond)}
	} else {
		delete(f.open, h.First)
	}
	return &api.SettleResponse{Fate: want}, nil
}

func (f *fakeSettled) Complete(_ context.Context, req *api.HandleRequest) (*api.SettleResponse, error) {
	return f.decide(req.Handle, api.Fate_FATE_COMPLETED, 0)
}

func (f *fakeSettled) Abandon(_ context.Context, req *api.HandleRequest) (*api.SettleResponse, error) {
	return f.decide(req.Handle, api.Fate_FATE_ABANDONED, 0)
}

func (f *fakeSettled) Extend(_ context.Context, req *api.ExtendRequest) (*api.SettleResponse, error) {
	return f.decide(req.Handle, api.Fate_FATE_OPEN, req.TtlMs)
}

func (f *fakeSettled) Watermark(context.Context, *api.WatermarkRequest) (*api.WatermarkResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expireLocked()
	f.reads++
	w := f.next
	for first := range f.open {
		w = min(w, first)
	}
	switch {
	case f.breaks == "early":
		w = f.next
	case f.breaks == "down" && f.reads%5 == 0:
		w--
	case f.breaks == "below":
		w = f.next + 100
	}
	return &api.WatermarkResponse{Watermark: f.lay.ID(w, 0), WatermarkTick: w}, nil
}

// runTracked runs tracked clients and a reader against f for a while
// and checks what they recorded.
func runTracked(t *testing.T, f *fakeSettled) (history.SettledReport, history.Report, TrackedCounts) {
	t.Helper()
	addr := serveSequencer(t, f)
	rec := history.NewRecorder()
	w, err := StartWorkload(WorkloadConfig{Addrs: []string{addr}, MaxCount: 1, Tracked: 4, Layout: f.lay}, rec)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	w.Stop()
	return history.CheckSettled(rec.SettleOps()), history.Check(rec.Ops()), w.TrackedCounts()
}

// TestTrackedWorkloadPassesACorrectCluster: against a correct stand-in
// the tracked clients and the reader record a history that passes, with
// every kind of call in it, and their Reserves in the ID history.
func TestTrackedWorkloadPassesACorrectCluster(t *testing.T) {
	settled, ids, counts := runTracked(t, newFakeSettled(t, ""))
	if !settled.OK() || !ids.OK() || counts.Failures() > 0 {
		t.Fatalf("a correct stand-in fails:\n%v\n%v\n%+v", settled, ids, counts)
	}
	if settled.Reads.OK == 0 || settled.Reserves.OK == 0 || settled.Completes.OK == 0 || settled.Abandons.OK == 0 {
		t.Fatalf("some kind of call never answered: %v", settled)
	}
	if ids.Acknowledged != settled.Reserves.OK || int64(settled.Reserves.OK) != counts.Reserved {
		t.Fatalf("%d Reserves in the ID history, %d in the settled one, %d counted; want them equal", ids.Acknowledged, settled.Reserves.OK, counts.Reserved)
	}
}

// TestTrackedWorkloadCatchesEachBreak: each way the stand-in breaks the
// settled order is caught by its check, and by no other.
func TestTrackedWorkloadCatchesEachBreak(t *testing.T) {
	for _, tt := range []struct {
		breaks string
		caught func(history.SettledReport) bool
	}{
		{"early", func(r history.SettledReport) bool {
			return r.CompletedSettled > 0 && r.WatermarkDown == 0 && r.ReservedSettled == 0
		}},
		{"down", func(r history.SettledReport) bool {
			return r.WatermarkDown > 0 && r.CompletedSettled == 0 && r.ReservedSettled == 0
		}},
		{"below", func(r history.SettledReport) bool { return r.ReservedSettled > 0 && r.WatermarkDown == 0 }},
	} {
		t.Run(tt.breaks, func(t *testing.T) {
			settled, _, _ := runTracked(t, newFakeSettled(t, tt.breaks))
			if settled.OK() || !tt.caught(settled) {
				t.Fatalf("a stand-in that breaks %q: %v", tt.breaks, settled)
			}
			t.Log(settled)
		})
	}
}
