package settle

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/history"
)

// The windows' model check: seeded random runs of unkeyed calls (alone,
// several in one Grants, and concurrent bursts), keyed calls and their
// retries, term changes (some with another leader serving in the term
// between), refills and entries that fail, and a clock that moves, over
// two layout sequences and a dense one. Every call is recorded in its
// sequence's history, and each history is checked (history.Check:
// unique IDs, a call that began after another ended has higher ones;
// history.CheckDense for the dense one). Within a step the calls of a
// Grants or a burst overlap; the steps follow one another, so most calls
// are ordered, which is what the checks bite on.

const (
	modelSeeds = 6
	modelSteps = 250
)

var modelSeqs = []string{"a", "b", "d"} // d is dense

// model is one run.
type model struct {
	t    *testing.T
	r    *rig
	rng  *rand.Rand
	recs map[string]*history.Recorder
	term uint64
	// failing is how many of the next entries with Allocs fail.
	failing atomic.Int32
	// keys are the keyed calls made so far, for retries.
	keys  []modelKey
	nkeys int
	// Counts of what the run did, to show it did it.
	stats struct {
		ok, failed, relead, others, injected int
	}
}

type modelKey struct {
	seq   string
	count uint64
	key   string
}

func TestWindowsModelCheck(t *testing.T) {
	for seed := uint64(1); seed <= modelSeeds; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			m := newModel(t, seed)
			for step := range modelSteps {
				m.step(step)
			}
			m.check()
		})
	}
}

func newModel(t *testing.T, seed uint64) *model {
	r := seqRig(t, []string{"a", "b"}, "d")
	m := &model{t: t, r: r, rng: rand.New(rand.NewPCG(seed, 0x5eed)), recs: map[string]*history.Recorder{}, term: 1}
	for _, s := range modelSeqs {
		m.recs[s] = history.NewRecorder()
	}
	r.log.setFail(func(c fsm.Command) bool {
		if len(c.Allocs) == 0 {
			return false
		}
		for {
			n := m.failing.Load()
			if n <= 0 {
				return false
			}
			if m.failing.CompareAndSwap(n, n-1) {
				return true
			}
		}
	})
	return m
}

func (m *model) seq() string { return modelSeqs[m.rng.IntN(len(modelSeqs))] }

func (m *model) count() uint64 {
	if m.rng.IntN(20) == 0 {
		return 1 + uint64(m.rng.IntN(int(span/4))) // a call that may need a refill at once
	}
	return 1 + uint64(m.rng.IntN(50))
}

// key returns "" (unkeyed, most calls), a new key, or an earlier key's
// retry with its first call's sequence and count.
func (m *model) key(seq string, count uint64) (string, uint64, string) {
	switch n := m.rng.IntN(10); {
	case n < 6:
		return seq, count, ""
	case n < 8 || len(m.keys) == 0:
		m.nkeys++
		k := modelKey{seq, count, fmt.Sprintf("k%d", m.nkeys)}
		m.keys = append(m.keys, k)
		return k.seq, k.count, k.key
	default:
		k := m.keys[m.rng.IntN(len(m.keys))]
		return k.seq, k.count, k.key
	}
}

func (m *model) step(step int) {
	switch n := m.rng.IntN(100); {
	case n < 35:
		m.grants(step, 1+m.rng.IntN(4))
	case n < 55:
		m.burst(step, 2+m.rng.IntN(5))
	case n < 65:
		m.relead()
	case n < 75:
		m.failing.Add(int32(1 + m.rng.IntN(2)))
		m.stats.injected++
	default:
		m.r.advance(time.Duration(m.rng.IntN(3000)) * time.Millisecond)
	}
}

// call is one call under way: its ask and its record.
type call struct {
	ask Ask
	rec history.Pending
}

func (m *model) begin(client int) call {
	seq, count, key := m.key(m.seq(), m.count())
	def, _ := m.r.fsm.Sequence(seq)
	return call{
		ask: Ask{Name: seq, Seq: &def, Count: count, Key: keyed(key)},
		rec: m.recs[seq].BeginKeyed(client, int(count), key),
	}
}

// end records how c's grant ended.
func (m *model) end(c call, g Grant) {
	m.t.Helper()
	within(m.t, "grant of "+c.ask.Name, g.Done())
	first, err := g.Result()
	if err != nil {
		// Not a definite refusal for the dense check: the entry may
		// have been applied.
		c.rec.Unknown(err)
		m.stats.failed++
		return
	}
	m.stats.ok++
	ids := make([]uint64, c.ask.Count)
	for i := range ids {
		ids[i] = first + uint64(i)
	}
	c.rec.OK(ids)
}

// grants makes n calls in one Grants.
func (m *model) grants(step, n int) {
	calls := make([]call, n)
	asks := make([]Ask, n)
	for i := range calls {
		calls[i] = m.begin(step*10 + i)
		asks[i] = calls[i].ask
	}
	for i, g := range m.r.s.Grants(ctx(m.t), asks) {
		m.end(calls[i], g)
	}
}

// burst makes n concurrent calls, each its own Grants.
func (m *model) burst(step, n int) {
	calls := make([]call, n)
	for i := range calls {
		calls[i] = m.begin(step*10 + i)
	}
	grants := make([]Grant, n)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			grants[i] = m.r.s.Grants(ctx(m.t), []Ask{calls[i].ask})[0]
		}()
	}
	wg.Wait()
	for i := range calls {
		m.end(calls[i], grants[i])
	}
}

// relead loses leadership and wins it back, in a later term; half the
// time another leader serves a call in the term between.
func (m *model) relead() {
	m.r.s.StepDown()
	m.stats.relead++
	if m.rng.IntN(2) == 0 {
		m.term++
		m.r.log.setTerm(m.term)
		seq, count := m.seq(), m.count()
		rec := m.recs[seq].BeginN(-1, int(count))
		a := m.r.otherLeader(seq, count)
		ids := make([]uint64, count)
		for i := range ids {
			ids[i] = a.First + uint64(i)
		}
		rec.OK(ids)
		m.stats.others++
	}
	m.term++
	m.r.relead(m.term)
}

func (m *model) check() {
	m.t.Helper()
	m.t.Logf("%d calls answered, %d failed; %d re-leads (%d with another leader between), %d failures injected",
		m.stats.ok, m.stats.failed, m.stats.relead, m.stats.others, m.stats.injected)
	if m.stats.ok < modelSteps || m.stats.failed == 0 || m.stats.others == 0 {
		m.t.Fatalf("the run did too little to check: %+v", m.stats)
	}
	for _, seq := range modelSeqs {
		ops := m.recs[seq].Ops()
		if rep := history.Check(ops); !rep.OK() {
			m.t.Errorf("sequence %s: %s", seq, rep)
		}
		if seq == "d" {
			if rep := history.CheckDense(ops, 1); !rep.OK() {
				m.t.Errorf("dense sequence %s: %s", seq, rep)
			}
		}
	}
}
