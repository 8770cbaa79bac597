package bench

import "fmt"

// Ratio compares two results of one invocation: on a shared machine only
// figures measured together mean something, so a run of several targets
// reads them against each other.
type Ratio struct {
	Of   string `json:"of"`
	Over string `json:"over"`
	// Requests is Of's requests/s over Over's; P50 is Of's median latency
	// over Over's.
	Requests float64 `json:"requests"`
	P50      float64 `json:"p50"`
}

// String is the human form.
func (r Ratio) String() string {
	return fmt.Sprintf("%s / %s: %.2f× requests/s, %.2f× p50", r.Of, r.Over, r.Requests, r.P50)
}

// Ratios compares the first result with each of the others. The
// watermark lag is left out: its one caller waits for the watcher, so
// its requests/s is no throughput.
func Ratios(rs []Result) []Ratio {
	var rated []Result
	for _, r := range rs {
		if r.Target != TargetWatermarkLag {
			rated = append(rated, r)
		}
	}
	var out []Ratio
	for _, r := range rated[min(1, len(rated)):] {
		out = append(out, Ratio{Of: rated[0].Target, Over: r.Target,
			Requests: div(rated[0].RequestsS, r.RequestsS), P50: div(float64(rated[0].P50), float64(r.P50))})
	}
	return out
}

// div is a/b, or 0 when b is: a run with no successful call has no rate
// to compare with.
func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
