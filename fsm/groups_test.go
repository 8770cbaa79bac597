package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seed-e8569b35/ordo/layout"
)

// twitterAsCustom makes the IDs of the twitter preset under another name.
const twitterAsCustom = "custom:epoch=1288834974657,unit=1,bits=41/10/12"

// TestDistinctGroupDecisionTable enumerates every small combination the
// distinct-group rule looks at and checks the rule on each: a create of
// "s" (twitter, group 3) is refused with ErrGroupInUse exactly when it
// asks for a distinct group and the cluster's default sequence is of the
// same layout and group, or another live named sequence is. The other
// sequence is of the same layout (by preset, or by a custom spec that
// makes the same IDs), of another layout with the same widths (default:
// another epoch), or dense, in group 3 or 5, live or dropped, or absent;
// "s" is created fresh or again after a drop of its own (which is never
// in the way). A refused create changes nothing.
func TestDistinctGroupDecisionTable(t *testing.T) {
	type other struct {
		kind    string
		group   uint64
		dropped bool
	}
	others := []*other{nil}
	for _, kind := range []string{"twitter", twitterAsCustom, "default", KindDense} {
		for _, group := range []uint64{3, 5} {
			if kind == KindDense && group != 3 {
				continue
			}
			if kind == KindDense {
				group = 0
			}
			for _, dropped := range []bool{false, true} {
				others = append(others, &other{kind, group, dropped})
			}
		}
	}
	cases, refusals := 0, 0
	for _, defaultKind := range []string{"twitter", twitterAsCustom, "default"} {
		for _, defaultGroup := range []uint64{3, 4} {
			for _, o := range others {
				for _, again := range []bool{false, true} {
					for _, distinct := range []bool{false, true} {
						name := fmt.Sprintf("default %s/%d, other %+v, again %v, distinct %v", defaultKind, defaultGroup, o, again, distinct)
						defaultSame := defaultKind != "default" && defaultGroup == 3
						otherSame := o != nil && !o.dropped && (o.kind == "twitter" || o.kind == twitterAsCustom) && o.group == 3
						want := distinct && (defaultSame || otherSame)
						cases++
						if want {
							refusals++
						}
						f := sequencedFSM(t)
						l, err := layout.Parse(defaultKind)
						if err != nil {
							t.Fatal(err)
						}
						applyOK(t, f, Command{Op: OpInit, Layout: &l, Group: defaultGroup}, 1)
						if o != nil {
							applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "other", Kind: o.kind, Group: o.group}, 1)
							if o.dropped {
								applyOK(t, f, Command{Op: OpDropSequence, Sequence: "other"}, 1)
							}
						}
						if again {
							applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "s", Kind: "twitter", Group: 3}, 1)
							applyOK(t, f, Command{Op: OpDropSequence, Sequence: "s"}, 1)
						}
						before := f.Sequences()
						r := applyCmd(t, f, Command{Op: OpCreateSequence, Sequence: "s", Kind: "twitter", Group: 3, DistinctGroup: distinct}, 1)
						if got := errors.Is(r.Err, ErrGroupInUse); got != want || (!want && r.Err != nil) {
							t.Errorf("%s: %v, want refused %v", name, r.Err, want)
							continue
						}
						seq, ok := f.Sequence("s")
						if want {
							if after := f.Sequences(); !sameSequences(before, after) {
								t.Errorf("%s: the refused create changed the sequences: %v, then %v", name, before, after)
							}
							blamed := "the cluster's default sequence"
							if !defaultSame {
								blamed = `sequence "other"`
							}
							if !strings.Contains(r.Err.Error(), blamed) {
								t.Errorf("%s: %v does not name %s", name, r.Err, blamed)
							}
							continue
						}
						if !ok || seq.Dropped || seq.Group != 3 || seq.Kind != "twitter" {
							t.Errorf("%s: created %+v (found %v)", name, seq, ok)
						}
					}
				}
			}
		}
	}
	if cases != 3*2*len(others)*2*2 || refusals == 0 || refusals == cases {
		t.Fatalf("%d cases, %d refusals: the table does not span the rule", cases, refusals)
	}
}

func sameSequences(a, b map[string]*Sequence) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestDistinctGroupNamesTheFirstUser: of several sequences in the group,
// the error names the first by name, whatever order the map holds them
// in, so every node's answer reads alike; and the error says how to fix
// it.
func TestDistinctGroupNamesTheFirstUser(t *testing.T) {
	f := sequencedFSM(t)
	for _, name := range []string{"zeta", "beta", "mu", "alpha"} {
		applyOK(t, f, Command{Op: OpCreateSequence, Sequence: name, Kind: "twitter", Group: 9}, 1)
	}
	r := applyCmd(t, f, Command{Op: OpCreateSequence, Sequence: "new", Kind: "twitter", Group: 9, DistinctGroup: true}, 1)
	if !errors.Is(r.Err, ErrGroupInUse) || !strings.Contains(r.Err.Error(), `sequence "alpha"'s`) ||
		!strings.Contains(r.Err.Error(), "choose another group (--group)") || !strings.Contains(r.Err.Error(), "leaving out --distinct-group") {
		t.Fatalf("got %v, want ErrGroupInUse naming alpha and the fix", r.Err)
	}
	// Without a layout recorded yet (no init), only named sequences count.
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "new", Kind: "twitter", Group: 10, DistinctGroup: true}, 1)
}

// TestDistinctGroupInTheLog: the flag travels in the entry (and is left
// out of it when false, so an entry reads as one written before it
// existed); an entry without it decodes as ever; a dense sequence cannot
// ask for it; a field the FSM does not know is still refused.
func TestDistinctGroupInTheLog(t *testing.T) {
	b, err := Encode(Command{Op: OpCreateSequence, Sequence: "s", Kind: "twitter", Group: 3, DistinctGroup: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"distinct_group":true`) {
		t.Fatalf("entry %s does not carry the flag", b)
	}
	if c, err := Decode(b); err != nil || !c.DistinctGroup {
		t.Fatalf("decodes to %+v, %v", c, err)
	}
	b, err = Encode(Command{Op: OpCreateSequence, Sequence: "s", Kind: "twitter", Group: 3})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "distinct") {
		t.Fatalf("entry %s names the flag while it is off", b)
	}
	old := `{"v":1,"op":"create_sequence","group":3,"sequence":"s","kind":"twitter"}`
	if c, err := Decode([]byte(old)); err != nil || c.DistinctGroup || c.Group != 3 {
		t.Fatalf("an entry from before the flag decodes to %+v, %v", c, err)
	}
	dense, err := Encode(Command{Op: OpCreateSequence, Sequence: "d", Kind: KindDense, DistinctGroup: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(dense); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "dense sequence has no group") {
		t.Fatalf("a dense create with the flag decodes: %v, want ErrInvalid", err)
	}
	unknown := `{"v":1,"op":"create_sequence","sequence":"s","kind":"twitter","distinct_groups":true}`
	if _, err := Decode([]byte(unknown)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an unknown field decodes: %v, want ErrMalformed", err)
	}
}
