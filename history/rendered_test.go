package history

import (
	"strings"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/layout"
)

// renderedOp returns an op whose IDs are ticks rendered by l with group 3 and
// random bits against the order, so that only the tick can order them.
func renderedOp(t *testing.T, l layout.Layout, client int, start, end int64, ticks ...uint64) Op {
	t.Helper()
	op := ok(client, 0, 0, ticks...)
	op.Start, op.End = durationOf(start), durationOf(end)
	for i, tick := range ticks {
		op.Rendered = append(op.Rendered, l.FormatWide(l.Render(tick, 3, ^uint64(0)*uint64(i%2))))
	}
	return op
}

func durationOf(ns int64) time.Duration { return time.Duration(ns) }

// TestCheckRendered: a history of properly rendered UUIDv7s and ULIDs
// passes; each way of breaking the rendered order, or the text, is caught
// as KindRendered and fails the report.
func TestCheckRendered(t *testing.T) {
	for _, name := range []string{"uuidv7", "ulid"} {
		l := layout.MustPreset(name)
		good := []Op{renderedOp(t, l, 1, 0, 10, 100, 101), renderedOp(t, l, 2, 20, 30, 1<<20, 1<<20+1)}
		if rep := Check(good); !rep.OK() {
			t.Fatalf("%s: a good history fails: %s", name, rep)
		}
		mutate := map[string]func(ops []Op){
			// Two IDs' texts swapped: each tick now renders as the other's.
			"swapped": func(ops []Op) { ops[1].Rendered[0], ops[0].Rendered[1] = ops[0].Rendered[1], ops[1].Rendered[0] },
			// A later ID rendered with an earlier time.
			"earlier": func(ops []Op) { ops[1].Rendered[1] = l.FormatWide(l.Render(50, 3, 0)) },
			// Not canonical: lower-case ULID, upper-case UUID (of an ID
			// whose random bits are all ones, so it has letters).
			"case": func(ops []Op) {
				s := ops[1].Rendered[1]
				if strings.ToUpper(s) == s {
					s = strings.ToLower(s)
				} else {
					s = strings.ToUpper(s)
				}
				ops[1].Rendered[1] = s
			},
			"garbage": func(ops []Op) { ops[0].Rendered[0] = "not an ID" },
			"missing": func(ops []Op) { ops[1].Rendered = ops[1].Rendered[:1] },
			// The last ID's text rendered from another, later tick: still
			// in order, but not this tick's ID.
			"other tick": func(ops []Op) { ops[1].Rendered[1] = l.FormatWide(l.Render(1<<20+1+1e9, 3, 0)) },
			// An acknowledged op with no text in a history of renderings.
			"unrendered": func(ops []Op) { ops[1].Rendered = nil },
		}
		for what, f := range mutate {
			ops := []Op{renderedOp(t, l, 1, 0, 10, 100, 101), renderedOp(t, l, 2, 20, 30, 1<<20, 1<<20+1)}
			f(ops)
			rep := Check(ops)
			if rep.OK() || rep.Misrendered == 0 || !strings.Contains(rep.String(), KindRendered) {
				t.Errorf("%s, %s: not caught: %s", name, what, rep)
			}
			if rep.OrderViolations != 0 || rep.Duplicates != 0 {
				t.Errorf("%s, %s: the ticks are fine, yet %s", name, what, rep)
			}
		}
	}
}
