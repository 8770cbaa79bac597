package metrics

import (
	"fmt"
	"math"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// fakeClock is a clock a test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// at sets the clock to d after the start.
func (c *fakeClock) at(start time.Time, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = start.Add(d)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestSequenceRate: 100 IDs a second read as 100 a second, in the first
// window (over the time since the start) and later ones (over the last
// RateWindow); once the IDs stop, the rate falls to half a window later
// and to 0 after a whole one, while the count stays; a sequence never
// counted is zero.
func TestSequenceRate(t *testing.T) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: start}
	c := NewSequenceCounts(clock.now)
	for k := range 30 { // 100 IDs at 0.5 s, 1.5 s, ... 29.5 s
		clock.at(start, time.Duration(k)*time.Second+500*time.Millisecond)
		c.Add([]string{"a", "b", "a"}, []uint64{60, 1, 40}) // one name twice in a batch counts twice
		if k == 3 {                                         // 4 s in: 400 IDs over 4 s
			clock.at(start, 4*time.Second)
			if got := c.Count("a"); !near(got.Rate, 100) || got.Issued != 400 {
				t.Fatalf("4 s in: %+v, want 400 IDs at 100/s", got)
			}
		}
		if k == 24 { // 25 s in: half of 10-20 s, all of 20-25 s
			clock.at(start, 25*time.Second)
			if got := c.Count("a"); !near(got.Rate, 100) || got.Issued != 2500 {
				t.Fatalf("25 s in: %+v, want 2500 IDs at 100/s", got)
			}
		}
	}
	for _, tt := range []struct {
		at   time.Duration
		rate float64
	}{{30 * time.Second, 100}, {35 * time.Second, 50}, {40 * time.Second, 0}, {time.Hour, 0}} {
		clock.at(start, tt.at)
		if got := c.Count("a"); !near(got.Rate, tt.rate) || got.Issued != 3000 {
			t.Errorf("at %s: %+v, want 3000 IDs at %g/s", tt.at, got, tt.rate)
		}
	}
	if got := c.Count("none"); got != (SequenceCount{Name: "none"}) {
		t.Errorf("a sequence never counted: %+v", got)
	}
	if all, total := c.All(); len(all) != 2 || total != 3030 {
		t.Errorf("All: %d sequences, %d IDs; want 2 and 3030", len(all), total)
	}
	// A first ID a moment after the start is not read as a burst.
	c = NewSequenceCounts(clock.now)
	c.Add([]string{"a"}, []uint64{1})
	if got := c.Count("a"); got.Rate != 1 {
		t.Errorf("one ID at the start: %g/s, want 1 (over at least a second)", got.Rate)
	}
}

// TestBusiest: by rate, highest first, then by name; the rest's rates
// summed; n past the count or below 0 is clamped.
func TestBusiest(t *testing.T) {
	counts := func() []SequenceCount {
		return []SequenceCount{{"c", 1, 5}, {"a", 1, 5}, {"z", 1, 9}, {"b", 1, 0}, {"y", 1, 1}}
	}
	top, other := Busiest(counts(), 3)
	var got []string
	for _, s := range top {
		got = append(got, s.Name)
	}
	if !slices.Equal(got, []string{"z", "a", "c"}) || other != 1 {
		t.Fatalf("top 3: %q, others %g/s; want z, a, c and 1", got, other)
	}
	if top, other := Busiest(counts(), 10); len(top) != 5 || other != 0 {
		t.Fatalf("top 10 of 5: %d, %g", len(top), other)
	}
	if top, other := Busiest(counts(), -1); len(top) != 0 || other != 20 {
		t.Fatalf("top -1: %d, %g", len(top), other)
	}
}

// series parses a scrape of reg: each series' value by its name and
// sequence label ("" for none).
func series(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := map[string]map[string]float64{}
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, _ := strings.Cut(line, " ")
		name, label, _ := strings.Cut(key, "{")
		label = strings.TrimSuffix(strings.TrimPrefix(label, `sequence="`), `"}`)
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if out[name] == nil {
			out[name] = map[string]float64{}
		}
		out[name][label] = v
	}
	return out
}

// TestSequenceSeriesBounded: with 10,000 sequences a scrape holds the n
// busiest ones' counts and rates, one series summing the others' rates
// and one counting all: 2n+2 series, each value right.
func TestSequenceSeriesBounded(t *testing.T) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: start}
	c := NewSequenceCounts(clock.now)
	clock.at(start, 15*time.Second)
	var total uint64
	for i := range 10_000 {
		n := uint64(i % 5000) // s-04999 and s-09999 are the busiest
		c.Add([]string{fmt.Sprintf("s-%05d", i)}, []uint64{n})
		total += n
	}
	clock.at(start, 20*time.Second) // half into the second window: n IDs count n/10 a second
	const n = 7
	reg := prometheus.NewRegistry()
	reg.MustRegister(newSequenceCollector(c, n))
	all := series(t, reg)
	issued, rates := all["ordo_sequence_ids_issued_total"], all["ordo_sequence_ids_per_second"]
	count := 0
	for _, s := range all {
		count += len(s)
	}
	if count != 2*n+2 || len(issued) != n || len(rates) != n+1 {
		t.Fatalf("%d series (%d counts, %d rates); want %d", count, len(issued), len(rates), 2*n+2)
	}
	want := []string{"s-04999", "s-09999", "s-04998", "s-09998", "s-04997", "s-09997", "s-04996"}
	var otherRate float64
	for i := range 10_000 {
		name, count := fmt.Sprintf("s-%05d", i), float64(i%5000)
		if !slices.Contains(want, name) {
			otherRate += count / 10
			continue
		}
		if issued[name] != count || !near(rates[name], count/10) {
			t.Errorf("%s: %g IDs at %g/s, want %g at %g/s", name, issued[name], rates[name], count, count/10)
		}
	}
	if math.Abs(rates[OtherSequences]-otherRate) > 1e-6*otherRate {
		t.Errorf("others: %g/s, want %g", rates[OtherSequences], otherRate)
	}
	if got := all["ordo_named_sequences_ids_issued_total"][""]; got != float64(total) {
		t.Errorf("all named sequences: %g IDs, want %d", got, total)
	}
}

// TestSequenceSeriesScraped: a node's scrape names at most the default
// number of sequences, however many handed out IDs, and a sequence's
// counter counts what IssuedIn counted for it.
func TestSequenceSeriesScraped(t *testing.T) {
	m := newFake(fakeRaft{state: raft.Leader})
	for i := range 10_000 {
		m.IssuedIn([]string{fmt.Sprintf("s-%05d", i)}, []uint64{1})
	}
	for range 3 {
		m.IssuedIn([]string{"busy"}, []uint64{1000})
	}
	m.Issued(5)
	text := scrape(t, m)
	named := 0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "ordo_sequence_ids_issued_total{") {
			named++
		}
	}
	if named != DefaultSequenceSeries {
		t.Fatalf("%d sequences named, want %d", named, DefaultSequenceSeries)
	}
	for _, want := range []string{
		`ordo_sequence_ids_issued_total{sequence="busy"} 3000`,
		`ordo_named_sequences_ids_issued_total 13000`,
		`ordo_ids_issued_total 5`,
	} {
		if !hasLine(text, want) {
			t.Errorf("no %q in\n%s", want, grepLines(text, "sequence"))
		}
	}
	if issued, rate := m.SequenceRate("busy"); issued != 3000 || rate <= 0 {
		t.Errorf("SequenceRate(busy) = %d, %g", issued, rate)
	}
	if m.RateWindow() != RateWindow {
		t.Errorf("RateWindow() = %s", m.RateWindow())
	}
}
