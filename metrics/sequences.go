package metrics

// Per-sequence counts: the IDs a leader hands out of each named sequence
// and their recent rate, which ordo status --sequences reports and the
// per-sequence series export. A cluster may hold 100,000 sequences, so
// the series name only the busiest few (Metrics' sequence series) and sum
// up the rest: a scrape stays the same size whatever the count.

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RateWindow is the interval a sequence's rate is measured over.
const RateWindow = 10 * time.Second

// DefaultSequenceSeries is how many named sequences the per-sequence
// series name when New is given 0, and MaxSequenceSeries the most it
// takes.
const (
	DefaultSequenceSeries = 20
	MaxSequenceSeries     = 1000
)

// OtherSequences is the sequence label of the series that sums the
// sequences the others do not name. No sequence is called that: a name
// starts with a letter or digit (api.CheckSequenceName).
const OtherSequences = "_other"

// SequenceCounts counts the IDs handed out of each named sequence and
// measures each one's rate over about the last RateWindow. It is safe
// for concurrent use. It keeps a few words per sequence ever counted,
// dropped ones included: at most fsm.MaxSequences of them, since only
// IDs a sequence handed out are counted.
type SequenceCounts struct {
	now   func() time.Time
	start time.Time

	mu   sync.Mutex
	seqs map[string]*seqCount
	all  uint64
}

// seqCount is one sequence's count. Time is cut into windows of
// RateWindow from start: cur counts the IDs of window number window,
// prev those of the window before it.
type seqCount struct {
	total     uint64
	window    int64
	cur, prev uint64
}

// SequenceCount is one sequence's figures at one instant.
type SequenceCount struct {
	Name string
	// Issued counts every ID handed out of it.
	Issued uint64
	// Rate is IDs per second over about the last RateWindow.
	Rate float64
}

// NewSequenceCounts returns counts that start now, on clock now.
func NewSequenceCounts(now func() time.Time) *SequenceCounts {
	return &SequenceCounts{now: now, start: now(), seqs: map[string]*seqCount{}}
}

// window is the number of the window t falls in, and how far into it t
// is, from 0 to 1.
func (c *SequenceCounts) window(t time.Time) (int64, float64) {
	d := max(t.Sub(c.start), 0)
	w := int64(d / RateWindow)
	return w, float64(d-time.Duration(w)*RateWindow) / float64(RateWindow)
}

// Add counts counts[i] IDs of sequence names[i], for each i, at one
// clock reading and under one lock: an answer's calls are counted
// together.
func (c *SequenceCounts) Add(names []string, counts []uint64) {
	w, _ := c.window(c.now())
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, name := range names {
		s := c.seqs[name]
		if s == nil {
			s = &seqCount{window: w}
			c.seqs[name] = s
		}
		if s.window != w {
			s.prev, s.cur = s.windowed(w)
			s.window = w
		}
		s.cur += counts[i]
		s.total += counts[i]
		c.all += counts[i]
	}
}

// windowed is s's prev and cur as of window w (at or after s.window).
func (s *seqCount) windowed(w int64) (prev, cur uint64) {
	switch s.window {
	case w:
		return s.prev, s.cur
	case w - 1:
		return s.cur, 0
	}
	return 0, 0
}

// rate is s's rate at frac into window w: the count of the window so far
// plus the share of the previous one that the last RateWindow still
// covers, per second. In the first window there is no previous one, and
// the count is over the time since start (at least a second, so that the
// first IDs do not read as a burst).
func (c *SequenceCounts) rate(s *seqCount, w int64, frac float64, t time.Time) float64 {
	prev, cur := s.windowed(w)
	if w == 0 {
		return float64(cur) / max(t.Sub(c.start).Seconds(), 1)
	}
	return (float64(prev)*(1-frac) + float64(cur)) / RateWindow.Seconds()
}

// Count is sequence name's figures now; zero when none was counted.
func (c *SequenceCounts) Count(name string) SequenceCount {
	t := c.now()
	w, frac := c.window(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seqs[name]
	if s == nil {
		return SequenceCount{Name: name}
	}
	return SequenceCount{Name: name, Issued: s.total, Rate: c.rate(s, w, frac, t)}
}

// All is every counted sequence's figures, at one instant, and the IDs
// of all of them together.
func (c *SequenceCounts) All() ([]SequenceCount, uint64) {
	t := c.now()
	w, frac := c.window(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]SequenceCount, 0, len(c.seqs))
	for name, s := range c.seqs {
		out = append(out, SequenceCount{Name: name, Issued: s.total, Rate: c.rate(s, w, frac, t)})
	}
	return out, c.all
}

// Busiest sorts counts by rate, highest first, then by name, and splits
// them after the first n: those, and the sum of the others' rates.
func Busiest(counts []SequenceCount, n int) (top []SequenceCount, otherRate float64) {
	slices.SortFunc(counts, func(a, b SequenceCount) int {
		if c := cmp.Compare(b.Rate, a.Rate); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	n = min(max(n, 0), len(counts))
	for _, s := range counts[n:] {
		otherRate += s.Rate
	}
	return counts[:n], otherRate
}

// sequenceCollector exports the busiest n sequences' counts and rates,
// labelled with their names, the other sequences' rates summed under
// OtherSequences, and every named sequence's IDs together: at most 2n+2
// series, however many sequences there are. Which sequences are named
// can change from one scrape to the next; a counter's value is always
// the sequence's whole count, so its rate is right while it is named.
type sequenceCollector struct {
	counts              *SequenceCounts
	n                   int
	issued, rate, total *prometheus.Desc
}

func newSequenceCollector(counts *SequenceCounts, n int) *sequenceCollector {
	return &sequenceCollector{
		counts: counts, n: n,
		issued: prometheus.NewDesc("ordo_sequence_ids_issued_total",
			"IDs of a named sequence this node handed out as leader, for the busiest named sequences by rate (the set can change between scrapes).", []string{"sequence"}, nil),
		rate: prometheus.NewDesc("ordo_sequence_ids_per_second",
			"IDs a second this leader handed out of a named sequence over about the last 10 s, for the busiest named sequences, and summed over the others (sequence=\"_other\").", []string{"sequence"}, nil),
		total: prometheus.NewDesc("ordo_named_sequences_ids_issued_total",
			"IDs of every named sequence together this node handed out as leader.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *sequenceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.issued
	ch <- c.rate
	ch <- c.total
}

// Collect implements prometheus.Collector.
func (c *sequenceCollector) Collect(ch chan<- prometheus.Metric) {
	all, total := c.counts.All()
	top, other := Busiest(all, c.n)
	for _, s := range top {
		ch <- prometheus.MustNewConstMetric(c.issued, prometheus.CounterValue, float64(s.Issued), s.Name)
		ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, s.Rate, s.Name)
	}
	ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, other, OtherSequences)
	ch <- prometheus.MustNewConstMetric(c.total, prometheus.CounterValue, float64(total))
}
