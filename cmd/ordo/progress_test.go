package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// An admin call retried for more than a second says why, at most every
// five seconds; a success or a first second of retries says nothing.
func TestRetryProgressSaysWhyAtMostEveryFiveSeconds(t *testing.T) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	at := start
	var out strings.Builder
	p := retryProgress{out: &out, now: func() time.Time { return at }, start: start}
	refused := errors.New("the node to add at 127.0.0.1:7107 does not answer")
	for _, step := range []struct {
		after time.Duration
		err   error
	}{
		{500 * time.Millisecond, refused}, // within the first second: quiet
		{1200 * time.Millisecond, refused},
		{3 * time.Second, refused}, // within five seconds of the last word
		{6300 * time.Millisecond, refused},
		{12 * time.Second, nil}, // succeeded
	} {
		at = start.Add(step.after)
		p.failed("127.0.0.1:7107", step.err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "after 1s") || !strings.Contains(lines[1], "after 6s") || !strings.Contains(lines[0], "127.0.0.1:7107: the node to add") {
		t.Fatalf("progress:\n%s\nwant two lines, after 1s and 6s, naming the cause", out.String())
	}
}
