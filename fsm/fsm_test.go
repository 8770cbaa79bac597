package fsm

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/layout"
)

// ---- helpers ---------------------------------------------------------------

func mustEncode(t testing.TB, c Command) []byte {
	t.Helper()
	b, err := Encode(c)
	if err != nil {
		t.Fatalf("Encode(%+v): %v", c, err)
	}
	return b
}

// apply runs one encoded command through the raft.FSM entry point and
// checks that Apply returned a Result.
func apply(t testing.TB, f *FSM, data []byte, term uint64) Result {
	t.Helper()
	out := f.Apply(&raft.Log{Index: 1, Term: term, Type: raft.LogCommand, Data: data})
	r, ok := out.(Result)
	if !ok {
		t.Fatalf("Apply returned %T, want fsm.Result", out)
	}
	return r
}

// applyCmd applies c as Raft appends it: the entry Entry builds.
func applyCmd(t testing.TB, f *FSM, c Command, term uint64) Result {
	t.Helper()
	e, err := Entry(c)
	if err != nil {
		t.Fatalf("Entry(%+v): %v", c, err)
	}
	e.Index, e.Term = 1, term
	r, ok := f.Apply(&e).(Result)
	if !ok {
		t.Fatalf("Apply returned %T, want fsm.Result", f.Apply(&e))
	}
	return r
}

func applyOK(t testing.TB, f *FSM, c Command, term uint64) Result {
	t.Helper()
	r := applyCmd(t, f, c, term)
	if r.Err != nil {
		t.Fatalf("apply %+v: unexpected error %v", c, r.Err)
	}
	return r
}

// initCalls records onInit invocations.
type initCalls struct {
	mu    sync.Mutex
	calls []initCall
}

type initCall struct {
	Layout layout.Layout
	Group  uint64
}

func (c *initCalls) record(l layout.Layout, g uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, initCall{l, g})
}

func (c *initCalls) get() []initCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]initCall(nil), c.calls...)
}

// memSink is an in-memory raft.SnapshotSink.
type memSink struct {
	bytes.Buffer
	writeErr  error
	closed    bool
	cancelled bool
}

func (s *memSink) Write(p []byte) (int, error) {
	if s.writeErr != nil {
		return 0, s.writeErr
	}
	return s.Buffer.Write(p)
}
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

var _ raft.SnapshotSink = (*memSink)(nil)

// snapshotBytes takes a snapshot of f and persists it into memory.
func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	defer snap.Release()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("Persist: %v", err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("Persist: sink closed=%v cancelled=%v, want closed and not cancelled", sink.closed, sink.cancelled)
	}
	return append([]byte(nil), sink.Bytes()...)
}

// populated returns an FSM with a layout, a high-water mark and two nodes.
func populated(t testing.TB) *FSM {
	t.Helper()
	f := New(nil, nil)
	l := layout.MustPreset("default")
	applyOK(t, f, Command{Op: OpInit, Layout: &l, Group: 7}, 1)
	applyOK(t, f, Command{Op: OpReserve, UpTo: 123456, Clock: 120000}, 1)
	applyOK(t, f, Command{Op: OpSetNode, NodeID: "a", GRPCAddr: "10.0.0.1:9000"}, 2)
	applyOK(t, f, Command{Op: OpSetNode, NodeID: "b", GRPCAddr: "10.0.0.2:9000"}, 2)
	return f
}

// ---- Apply -----------------------------------------------------------------

func TestApplyEveryOp(t *testing.T) {
	l := layout.MustPreset("default")
	f := New(nil, nil)
	steps := []struct {
		name      string
		cmd       Command
		term      uint64
		prev, hw  uint64
		wantState func(State) bool
	}{
		{"init", Command{Op: OpInit, Layout: &l, Group: 3}, 1, 0, 0,
			func(s State) bool { return s.Layout != nil && *s.Layout == l && s.Group == 3 }},
		{"reserve", Command{Op: OpReserve, UpTo: 100}, 2, 0, 100,
			func(s State) bool { return s.HighWater == 100 }},
		{"set_node", Command{Op: OpSetNode, NodeID: "n1", GRPCAddr: "h:1"}, 4, 100, 100,
			func(s State) bool { return s.Nodes["n1"] == "h:1" }},
		{"set_node overwrite", Command{Op: OpSetNode, NodeID: "n1", GRPCAddr: "h:2"}, 4, 100, 100,
			func(s State) bool { return s.Nodes["n1"] == "h:2" && len(s.Nodes) == 1 }},
		{"delete_node", Command{Op: OpDeleteNode, NodeID: "n1"}, 5, 100, 100,
			func(s State) bool { _, ok := s.Nodes["n1"]; return !ok }},
		{"delete_node unknown", Command{Op: OpDeleteNode, NodeID: "nobody"}, 5, 100, 100,
			func(s State) bool { return len(s.Nodes) == 0 }},
		{"reserve higher", Command{Op: OpReserve, UpTo: 250}, 6, 100, 250,
			func(s State) bool { return s.HighWater == 250 }},
	}
	for _, st := range steps {
		r := applyCmd(t, f, st.cmd, st.term)
		if r.Err != nil {
			t.Fatalf("%s: unexpected error %v", st.name, r.Err)
		}
		if r.Prev != st.prev || r.HighWater != st.hw || r.Term != st.term {
			t.Errorf("%s: Result{Prev:%d HighWater:%d Term:%d}, want {%d %d %d}",
				st.name, r.Prev, r.HighWater, r.Term, st.prev, st.hw, st.term)
		}
		if s := f.State(); !st.wantState(s) {
			t.Errorf("%s: unexpected state %+v", st.name, s)
		}
		if f.HighWater() != r.HighWater {
			t.Errorf("%s: HighWater() = %d, Result.HighWater = %d", st.name, f.HighWater(), r.HighWater)
		}
	}
}

func TestHighWaterNeverGoesDown(t *testing.T) {
	f := New(nil, nil)
	seq := []struct {
		upTo, prev, hw uint64
	}{
		{1000, 0, 1000},
		{500, 1000, 1000},  // lower: ignored
		{1000, 1000, 1000}, // equal: repeated reservation
		{1, 1000, 1000},
		{1001, 1000, 1001},
		{^uint64(0), 1001, ^uint64(0)},
		{5, ^uint64(0), ^uint64(0)},
	}
	for i, s := range seq {
		r := applyOK(t, f, Command{Op: OpReserve, UpTo: s.upTo}, uint64(i+1))
		if r.Prev != s.prev || r.HighWater != s.hw {
			t.Errorf("reserve %d: Prev=%d HighWater=%d, want %d %d", s.upTo, r.Prev, r.HighWater, s.prev, s.hw)
		}
		if r.Term != uint64(i+1) {
			t.Errorf("reserve %d: Term=%d, want %d", s.upTo, r.Term, i+1)
		}
		if got := f.HighWater(); got != s.hw {
			t.Errorf("reserve %d: HighWater()=%d, want %d", s.upTo, got, s.hw)
		}
	}
}

func TestResultTermIsLogTerm(t *testing.T) {
	f := New(nil, nil)
	for _, term := range []uint64{0, 1, 2, 99, 1 << 40, ^uint64(0)} {
		for _, c := range []Command{
			{Op: OpDeleteNode, NodeID: "gone"},
			{Op: OpReserve, UpTo: 10},
			{Op: OpSetNode, NodeID: "x", GRPCAddr: "y"},
		} {
			if r := applyOK(t, f, c, term); r.Term != term {
				t.Errorf("%s in term %d: Result.Term = %d", c.Op, term, r.Term)
			}
		}
		// A rejected command still reports the entry's term.
		if r := apply(t, f, []byte("garbage"), term); r.Err == nil || r.Term != term {
			t.Errorf("garbage in term %d: Result{Err:%v Term:%d}", term, r.Err, r.Term)
		}
	}
}

func TestInit(t *testing.T) {
	def := layout.MustPreset("default")
	tw := layout.MustPreset("twitter")
	calls := &initCalls{}
	f := New(calls.record, nil)
	applyOK(t, f, Command{Op: OpReserve, UpTo: 77}, 1)

	r := applyOK(t, f, Command{Op: OpInit, Layout: &def, Group: 5}, 1)
	if r.Prev != 77 || r.HighWater != 77 {
		t.Errorf("init Result Prev=%d HighWater=%d, want 77 77", r.Prev, r.HighWater)
	}
	if got := calls.get(); !reflect.DeepEqual(got, []initCall{{def, 5}}) {
		t.Fatalf("onInit calls after init = %+v", got)
	}
	want := f.State()
	if want.Layout == nil || *want.Layout != def || want.Group != 5 {
		t.Fatalf("state after init: %+v", want)
	}

	// The same init again is a no-op and does not notify again.
	applyOK(t, f, Command{Op: OpInit, Layout: &def, Group: 5}, 2)
	if got := f.State(); !reflect.DeepEqual(got, want) {
		t.Errorf("state after repeated init = %+v, want %+v", got, want)
	}
	if got := calls.get(); len(got) != 1 {
		t.Errorf("onInit called %d times after repeated init, want 1", len(got))
	}

	// A different layout or group is rejected and changes nothing.
	other := def
	other.EpochMs++
	for _, c := range []Command{
		{Op: OpInit, Layout: &tw, Group: 5},
		{Op: OpInit, Layout: &def, Group: 6},
		{Op: OpInit, Layout: &def, Group: 0},
		{Op: OpInit, Layout: &other, Group: 5},
		{Op: OpInit, Layout: &tw, Group: 0},
	} {
		r := applyCmd(t, f, c, 3)
		if !errors.Is(r.Err, ErrLayoutMismatch) {
			t.Errorf("init %s group %d: err = %v, want ErrLayoutMismatch", c.Layout, c.Group, r.Err)
		}
		if r.Term != 3 || r.Prev != 77 || r.HighWater != 77 {
			t.Errorf("init %s group %d: Result %+v", c.Layout, c.Group, r)
		}
		if got := f.State(); !reflect.DeepEqual(got, want) {
			t.Errorf("init %s group %d changed state to %+v", c.Layout, c.Group, got)
		}
	}
	if got := calls.get(); len(got) != 1 {
		t.Errorf("onInit called %d times, want 1", len(got))
	}
}

// The FSM must keep its own copy of the layout: neither the command's
// pointer nor a State() copy may alias it.
func TestInitLayoutNotAliased(t *testing.T) {
	l := layout.MustPreset("default")
	f := New(nil, nil)
	if r := f.apply(Command{Op: OpInit, Layout: &l}, 1); r.Err != nil {
		t.Fatal(r.Err)
	}
	l.EpochMs = 1
	s := f.State()
	if s.Layout.EpochMs == 1 {
		t.Fatal("FSM state aliases the command's layout")
	}
	s.Layout.EpochMs = 2
	s.Nodes["evil"] = "x"
	s2 := f.State()
	if s2.Layout.EpochMs == 2 || len(s2.Nodes) != 0 {
		t.Fatalf("State() returned aliased data: %+v", s2)
	}
}

func TestNilOnInit(t *testing.T) {
	f := New(nil, nil)
	l := layout.MustPreset("default")
	applyOK(t, f, Command{Op: OpInit, Layout: &l}, 1)
	if err := New(nil, nil).Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatalf("Restore with nil onInit: %v", err)
	}
}

func TestNodes(t *testing.T) {
	f := New(nil, nil)
	if _, ok := f.NodeAddr("a"); ok {
		t.Fatal("NodeAddr on empty FSM found a node")
	}
	applyOK(t, f, Command{Op: OpSetNode, NodeID: "a", GRPCAddr: "h1:1"}, 1)
	applyOK(t, f, Command{Op: OpSetNode, NodeID: "b", GRPCAddr: "h2:1"}, 1)
	if a, ok := f.NodeAddr("a"); !ok || a != "h1:1" {
		t.Errorf("NodeAddr(a) = %q %v", a, ok)
	}
	applyOK(t, f, Command{Op: OpSetNode, NodeID: "a", GRPCAddr: "h1:2"}, 2)
	if a, _ := f.NodeAddr("a"); a != "h1:2" {
		t.Errorf("NodeAddr(a) after update = %q", a)
	}
	applyOK(t, f, Command{Op: OpDeleteNode, NodeID: "a"}, 3)
	if _, ok := f.NodeAddr("a"); ok {
		t.Error("node a still known after delete_node")
	}
	if got := f.State().Nodes; !reflect.DeepEqual(got, map[string]string{"b": "h2:1"}) {
		t.Errorf("Nodes = %v", got)
	}
	// Deleting an unknown node is accepted and changes nothing.
	applyOK(t, f, Command{Op: OpDeleteNode, NodeID: "zzz"}, 3)
	if got := f.State().Nodes; !reflect.DeepEqual(got, map[string]string{"b": "h2:1"}) {
		t.Errorf("Nodes after deleting unknown = %v", got)
	}
}

// ---- Snapshot / Restore ----------------------------------------------------

func TestSnapshotRestore(t *testing.T) {
	src := populated(t)
	want := src.State()
	data := snapshotBytes(t, src)

	calls := &initCalls{}
	dst := New(calls.record, nil)
	if err := dst.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := dst.State(); !reflect.DeepEqual(got, want) {
		t.Errorf("restored state = %+v, want %+v", got, want)
	}
	if got := calls.get(); !reflect.DeepEqual(got, []initCall{{*want.Layout, want.Group}}) {
		t.Errorf("onInit calls on Restore = %+v", got)
	}
	// The restored FSM keeps working: the mark still only goes up.
	r := applyOK(t, dst, Command{Op: OpReserve, UpTo: 5}, 9)
	if r.Prev != want.HighWater || r.HighWater != want.HighWater {
		t.Errorf("reserve after restore: %+v, want Prev=HighWater=%d", r, want.HighWater)
	}
	// The snapshot is taken at the time of Snapshot, not of Persist.
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	applyOK(t, src, Command{Op: OpReserve, UpTo: want.HighWater + 1000}, 3)
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if !bytes.Equal(sink.Bytes(), data) {
		t.Errorf("snapshot changed after later apply:\n got %s\nwant %s", sink.Bytes(), data)
	}
}

// The proposer's clock reading rides in Extensions: the Data is what an
// older node decodes strictly, so it must be exactly the command without
// the reading. The FSM keeps the highest reading; an unreadable one counts
// as none, as on older nodes, and never stops the mark from moving.
func TestClockTravelsInExtensions(t *testing.T) {
	c := Command{Op: OpReserve, UpTo: 1000, Clock: 900}
	e, err := Entry(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := mustEncode(t, Command{Op: OpReserve, UpTo: 1000}); !bytes.Equal(e.Data, want) {
		t.Errorf("Data = %s, want %s: an older node would reject it", e.Data, want)
	}
	if len(e.Extensions) == 0 {
		t.Fatal("no Extensions: the clock reading is lost")
	}
	if d, err := Decode(e.Data); err != nil || d.Clock != 0 {
		t.Errorf("Decode(Data) = %+v, %v; want the command without its clock", d, err)
	}
	f := New(nil, nil)
	steps := []struct {
		name      string
		log       raft.Log
		hw, clock uint64
	}{
		{"reading recorded", e, 1000, 900},
		{"lower reading kept out", mustEntry(t, Command{Op: OpReserve, UpTo: 1100, Clock: 500}), 1100, 900},
		{"no reading", mustEntry(t, Command{Op: OpReserve, UpTo: 1200}), 1200, 900},
		{"higher reading", mustEntry(t, Command{Op: OpReserve, UpTo: 1300, Clock: 1250}), 1300, 1250},
		{"unreadable reading", raft.Log{Type: raft.LogCommand, Data: mustEncode(t, Command{Op: OpReserve, UpTo: 1400}), Extensions: []byte(`{"clock":"soon"}`)}, 1400, 1250},
		{"not JSON", raft.Log{Type: raft.LogCommand, Data: mustEncode(t, Command{Op: OpReserve, UpTo: 1500}), Extensions: []byte{0xff, 0}}, 1500, 1250},
		{"later fields ignored", raft.Log{Type: raft.LogCommand, Data: mustEncode(t, Command{Op: OpReserve, UpTo: 1600}), Extensions: []byte(`{"clock":2000,"zone":"x"}`)}, 1600, 2000},
		{"only reservations carry it", mustEntry(t, Command{Op: OpSetNode, NodeID: "a", GRPCAddr: "h:1", Clock: 9999}), 1600, 2000},
	}
	for _, s := range steps {
		r, ok := f.Apply(&s.log).(Result)
		if !ok || r.Err != nil {
			t.Fatalf("%s: Apply = %+v", s.name, r)
		}
		if r.HighWater != s.hw || r.ClockHigh != s.clock {
			t.Errorf("%s: high-water %d clock %d, want %d and %d", s.name, r.HighWater, r.ClockHigh, s.hw, s.clock)
		}
	}
	if got := f.State().ClockHigh; got != 2000 {
		t.Errorf("State().ClockHigh = %d, want 2000", got)
	}
	// MarkClock is the reading of the reservation that last raised the
	// mark; a reservation below the mark leaves it, and the next Result
	// reports it as PrevClock.
	applyOK(t, f, Command{Op: OpReserve, UpTo: 10, Clock: 3000}, 1)
	if r := applyOK(t, f, Command{Op: OpReserve, UpTo: 1700}, 1); r.PrevClock != 2000 {
		t.Errorf("PrevClock = %d, want 2000 (a lower reservation does not set the mark's reading)", r.PrevClock)
	}
	if r := applyOK(t, f, Command{Op: OpReserve, UpTo: 1800, Clock: 1750}, 1); r.PrevClock != 0 {
		t.Errorf("PrevClock = %d, want 0: the mark 1700 came with no reading", r.PrevClock)
	}
	if got := f.State().MarkClock; got != 1750 {
		t.Errorf("State().MarkClock = %d, want 1750", got)
	}
}

func mustEntry(t testing.TB, c Command) raft.Log {
	t.Helper()
	e, err := Entry(c)
	if err != nil {
		t.Fatalf("Entry(%+v): %v", c, err)
	}
	return e
}

func TestSnapshotRestoreEmpty(t *testing.T) {
	calls := &initCalls{}
	dst := New(calls.record, nil)
	applyOK(t, dst, Command{Op: OpSetNode, NodeID: "old", GRPCAddr: "x"}, 1)
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, New(nil, nil))))); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := dst.State(); !reflect.DeepEqual(got, New(nil, nil).State()) {
		t.Errorf("restored empty state = %+v", got)
	}
	if n := len(calls.get()); n != 0 {
		t.Errorf("onInit called %d times restoring a state without layout", n)
	}
	// The restored map must be usable.
	applyOK(t, dst, Command{Op: OpSetNode, NodeID: "a", GRPCAddr: "b"}, 2)
}

func TestRestoreWithoutNodesField(t *testing.T) {
	f := New(nil, nil)
	if err := f.Restore(io.NopCloser(strings.NewReader(`{"high_water":9,"group":0}`))); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	// A missing map must come back as an empty one, so set_node works.
	applyOK(t, f, Command{Op: OpSetNode, NodeID: "a", GRPCAddr: "b"}, 1)
	if f.HighWater() != 9 {
		t.Errorf("HighWater = %d, want 9", f.HighWater())
	}
}

type closeTracker struct {
	io.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }

func TestRestoreGarbageKeepsState(t *testing.T) {
	tests := []struct {
		name string
		data string
	}{
		{name: "empty", data: ""},
		{name: "not json", data: "not json"},
		{name: "truncated", data: `{"high_water":5,"nodes":{"a":`},
		{name: "unknown field", data: `{"high_water":5,"nodes":{},"extra":1}`},
		{name: "wrong type", data: `{"high_water":"five","nodes":{}}`},
		{name: "negative mark", data: `{"high_water":-1,"nodes":{}}`},
		{name: "array", data: `[1,2,3]`},
		// JSON null decodes without error into the zero State, so Restore
		// would replace the state with an empty one, lowering the mark to 0.
		{name: "null", data: `null`},
		{name: "trailing data", data: `{"high_water":5,"nodes":{}} {}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := &initCalls{}
			f := populated(t)
			f.onInit = calls.record
			want := f.State()
			rc := &closeTracker{Reader: strings.NewReader(tt.data)}
			if err := f.Restore(rc); err == nil {
				t.Fatalf("Restore(%q) succeeded, want error", tt.data)
			}
			if !rc.closed {
				t.Error("Restore did not close its reader")
			}
			if got := f.State(); !reflect.DeepEqual(got, want) {
				t.Errorf("state after failed Restore = %+v, want %+v", got, want)
			}
			if n := len(calls.get()); n != 0 {
				t.Errorf("onInit called %d times by a failed Restore", n)
			}
		})
	}
}

func TestPersistWriteError(t *testing.T) {
	snap, err := populated(t).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	sink := &memSink{writeErr: boom}
	if err := snap.Persist(sink); !errors.Is(err, boom) {
		t.Errorf("Persist with failing sink = %v, want %v", err, boom)
	}
	if !sink.cancelled || sink.closed {
		t.Errorf("failing Persist: cancelled=%v closed=%v, want cancelled and not closed", sink.cancelled, sink.closed)
	}
}

// ---- malformed commands ----------------------------------------------------

// rejectCase is a command Decode and Apply must refuse, with the sentinel
// the refusal wraps.
type rejectCase struct {
	name string
	data string
	want error
}

// rejectedCommands lists commands the FSM must refuse: bytes that are not
// one JSON object, unknown versions and ops, trailing data, wrong JSON
// types, and known commands with bad fields. FuzzDecode starts from them
// too. It also returns a valid init next to the "group does not fit" case,
// which the caller checks is accepted.
func rejectedCommands(t testing.TB) (cases []rejectCase, validNeighbour string) {
	t.Helper()
	// A 2-bit group field holds groups 0..3.
	tiny, err := layout.Parse("custom:epoch=1704067200000,unit=1,bits=41/2/20")
	if err != nil {
		t.Fatal(err)
	}
	tinyJSON := string(mustEncode(t, Command{Op: OpInit, Layout: &tiny, Group: 3}))
	tooBig := strings.Replace(tinyJSON, `"group":3`, `"group":4`, 1)
	if tooBig == tinyJSON {
		t.Fatalf("could not build an over-wide group from %s", tinyJSON)
	}
	valid := string(mustEncode(t, Command{Op: OpDeleteNode, NodeID: "gone"}))

	return []rejectCase{
		// Not one JSON object.
		{name: "empty", data: "", want: ErrMalformed},
		{name: "white space", data: " \n\t", want: ErrMalformed},
		{name: "not json", data: "reserve 5", want: ErrMalformed},
		{name: "binary", data: "\x00\xff\xfe\x01\x82\xa3foo", want: ErrMalformed},
		{name: "msgpack map", data: "\x82\xa1v\x01\xa2op\xa7reserve", want: ErrMalformed},
		{name: "json string", data: `"delete_node"`, want: ErrMalformed},
		{name: "json array", data: `[1]`, want: ErrMalformed},
		{name: "json number", data: `1`, want: ErrMalformed},
		{name: "json bool", data: `true`, want: ErrMalformed},
		{name: "truncated", data: `{"v":1,"op":"reserve","up_to":`, want: ErrMalformed},
		{name: "unterminated string", data: `{"v":1,"op":"delete_node","node_id":"gone}`, want: ErrMalformed},
		// Trailing data after a valid command.
		{name: "trailing object", data: valid + valid, want: ErrMalformed},
		{name: "trailing garbage", data: valid + " x", want: ErrMalformed},
		{name: "trailing number", data: valid + "1", want: ErrMalformed},
		{name: "trailing brace", data: valid + "}", want: ErrMalformed},
		{name: "trailing bracket", data: valid + "]", want: ErrMalformed},
		{name: "trailing NUL", data: valid + "\x00", want: ErrMalformed},
		{name: "trailing null", data: valid + "null", want: ErrMalformed},
		// Fields this version does not know.
		{name: "unknown field", data: `{"v":1,"op":"delete_node","node_id":"gone","extra":true}`, want: ErrMalformed},
		{name: "unknown layout field", data: strings.Replace(tinyJSON, `"order"`, `"zone":"utc","order"`, 1), want: ErrMalformed},
		// Wrong JSON types.
		{name: "wrong type", data: `{"v":1,"op":"reserve","up_to":"10"}`, want: ErrMalformed},
		{name: "version as string", data: `{"v":"1","op":"delete_node","node_id":"gone"}`, want: ErrMalformed},
		{name: "version as float", data: `{"v":1.0,"op":"delete_node","node_id":"gone"}`, want: ErrMalformed},
		{name: "op as number", data: `{"v":1,"op":2,"up_to":5}`, want: ErrMalformed},
		{name: "op as object", data: `{"v":1,"op":{"name":"reserve"},"up_to":5}`, want: ErrMalformed},
		{name: "node_id as number", data: `{"v":1,"op":"delete_node","node_id":7}`, want: ErrMalformed},
		{name: "layout as string", data: `{"v":1,"op":"init","layout":"default"}`, want: ErrMalformed},
		{name: "group as bool", data: `{"v":1,"op":"init","layout":null,"group":true}`, want: ErrMalformed},
		{name: "negative up_to", data: `{"v":1,"op":"reserve","up_to":-1}`, want: ErrMalformed},
		{name: "float up_to", data: `{"v":1,"op":"reserve","up_to":1.5}`, want: ErrMalformed},
		{name: "up_to above 2^64", data: `{"v":1,"op":"reserve","up_to":18446744073709551616}`, want: ErrMalformed},
		{name: "negative width", data: strings.Replace(tinyJSON, `"seq_bits":20`, `"seq_bits":-20`, 1), want: ErrMalformed},
		// Versions this FSM does not read.
		{name: "version missing", data: `{"op":"delete_node","node_id":"gone"}`, want: ErrUnknownVersion},
		{name: "version 0", data: `{"v":0,"op":"delete_node","node_id":"gone"}`, want: ErrUnknownVersion},
		{name: "version 2", data: `{"v":2,"op":"delete_node","node_id":"gone"}`, want: ErrUnknownVersion},
		{name: "version -1", data: `{"v":-1,"op":"reserve","up_to":5}`, want: ErrUnknownVersion},
		{name: "json null", data: `null`, want: ErrUnknownVersion},
		{name: "empty object", data: `{}`, want: ErrUnknownVersion},
		// Ops this FSM does not know.
		{name: "unknown op", data: `{"v":1,"op":"explode"}`, want: ErrUnknownOp},
		{name: "empty op", data: `{"v":1}`, want: ErrUnknownOp},
		{name: "null op", data: `{"v":1,"op":null,"up_to":5}`, want: ErrUnknownOp},
		{name: "op wrong case", data: `{"v":1,"op":"RESERVE","up_to":5}`, want: ErrUnknownOp},
		{name: "op with space", data: `{"v":1,"op":"reserve ","up_to":5}`, want: ErrUnknownOp},
		// Known ops with bad fields.
		{name: "reserve up_to 0", data: `{"v":1,"op":"reserve","up_to":0}`, want: ErrInvalid},
		{name: "reserve without up_to", data: `{"v":1,"op":"reserve"}`, want: ErrInvalid},
		{name: "init without layout", data: `{"v":1,"op":"init","group":1}`, want: ErrInvalid},
		{name: "init with null layout", data: `{"v":1,"op":"init","layout":null}`, want: ErrInvalid},
		{name: "init group does not fit", data: tooBig, want: ErrInvalid},
		{name: "init with empty layout", data: `{"v":1,"op":"init","layout":{}}`, want: ErrInvalid},
		{name: "init with bad widths", data: strings.Replace(tinyJSON, `"seq_bits":20`, `"seq_bits":21`, 1), want: ErrInvalid},
		{name: "set_node without addr", data: `{"v":1,"op":"set_node","node_id":"a"}`, want: ErrInvalid},
		{name: "set_node without id", data: `{"v":1,"op":"set_node","grpc_addr":"h:1"}`, want: ErrInvalid},
		{name: "delete_node without id", data: `{"v":1,"op":"delete_node"}`, want: ErrInvalid},
	}, tinyJSON
}

// TestRejectMalformed checks each refusal twice: Decode returns the
// sentinel and no command, and FSM.Apply, given the bytes as a raft.Log,
// returns a Result carrying that error and the entry's term, without
// changing the state or calling onInit.
func TestRejectMalformed(t *testing.T) {
	tests, validNeighbour := rejectedCommands(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Decode([]byte(tt.data))
			if !errors.Is(err, tt.want) {
				t.Errorf("Decode(%q) = %+v, %v; want %v", tt.data, c, err, tt.want)
			}
			if err != nil && !reflect.DeepEqual(c, Command{}) {
				t.Errorf("Decode(%q) returned a non-zero Command %+v with its error", tt.data, c)
			}

			calls := &initCalls{}
			f := populated(t)
			f.onInit = calls.record
			want := f.State()
			r := apply(t, f, []byte(tt.data), 42)
			if !errors.Is(r.Err, tt.want) {
				t.Errorf("Apply(%q).Err = %v, want %v", tt.data, r.Err, tt.want)
			}
			if r.Term != 42 {
				t.Errorf("Apply(%q).Term = %d, want 42", tt.data, r.Term)
			}
			if r.Prev != want.HighWater || r.HighWater != want.HighWater {
				t.Errorf("Apply(%q) = Prev %d HighWater %d, want both %d", tt.data, r.Prev, r.HighWater, want.HighWater)
			}
			if got := f.State(); !reflect.DeepEqual(got, want) {
				t.Errorf("rejected command changed state: %+v, want %+v", got, want)
			}
			if n := len(calls.get()); n != 0 {
				t.Errorf("rejected command called onInit %d times", n)
			}
			// A known op with a bad field is rejected alike by every
			// version that knows the op: skipped, not unreadable.
			if errors.Is(tt.want, ErrInvalid) {
				if err := f.Unreadable(); err != nil {
					t.Errorf("after Apply(%q), Unreadable() = %v, want nil for an invalid command", tt.data, err)
				}
				snapshotBytes(t, f)
				return
			}
			if err := f.Unreadable(); !errors.Is(err, ErrUnreadable) || !errors.Is(err, tt.want) {
				t.Errorf("after Apply(%q), Unreadable() = %v, want ErrUnreadable and %v", tt.data, err, tt.want)
			}
			if _, err := f.Snapshot(); !errors.Is(err, ErrUnreadable) {
				t.Errorf("Snapshot after Apply(%q) = %v, want ErrUnreadable", tt.data, err)
			}
		})
	}

	// The valid neighbour of "group does not fit" is accepted, so the case
	// above fails for the group and not for something else.
	if _, err := Decode([]byte(validNeighbour)); err != nil {
		t.Errorf("Decode(%s): %v", validNeighbour, err)
	}
}

// TestUnreadableEntryHoldsBackSnapshots: the first entry Apply cannot
// read is reported once, by index, and kept: later entries still apply,
// but no snapshot is taken until a restored state replaces what the
// entry was missing from.
func TestUnreadableEntryHoldsBackSnapshots(t *testing.T) {
	var reported []error
	f := New(nil, func(err error) { reported = append(reported, err) })
	applyOK(t, f, Command{Op: OpReserve, UpTo: 100}, 1)
	snapshotBytes(t, f) // a control: snapshots work before
	newer := []byte(`{"v":2,"op":"reserve","up_to":500}`)
	for i, index := range []uint64{7, 9} {
		r, _ := f.Apply(&raft.Log{Index: index, Term: 2, Type: raft.LogCommand, Data: newer}).(Result)
		if !errors.Is(r.Err, ErrUnreadable) || !errors.Is(r.Err, ErrUnknownVersion) {
			t.Fatalf("entry %d: Apply = %v, want ErrUnreadable and ErrUnknownVersion", i, r.Err)
		}
	}
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), "entry 7 of term 2") {
		t.Fatalf("reported %v, want the first unreadable entry, 7, once", reported)
	}
	if err := f.Unreadable(); err != reported[0] {
		t.Fatalf("Unreadable() = %v, want what was reported, %v", err, reported[0])
	}
	applyOK(t, f, Command{Op: OpReserve, UpTo: 200}, 2)
	if hw := f.HighWater(); hw != 200 {
		t.Fatalf("high-water %d after a later reservation, want 200", hw)
	}
	if _, err := f.Snapshot(); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("Snapshot with an unreadable entry = %v, want ErrUnreadable", err)
	}
	other := New(nil, nil)
	applyOK(t, other, Command{Op: OpReserve, UpTo: 500}, 2)
	if err := f.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, other)))); err != nil {
		t.Fatal(err)
	}
	if err := f.Unreadable(); err != nil {
		t.Fatalf("Unreadable() after a restore = %v, want nil", err)
	}
	snapshotBytes(t, f)
}

// TestEveryFormatWrittenIsReadable: the entries every earlier version of
// Ordo committed still apply, none of them unreadable, so a node that
// replays an old log neither stops nor skips a reservation. The confirm
// op, which versions before the term round committed for every
// confirmed read, changes nothing.
func TestEveryFormatWrittenIsReadable(t *testing.T) {
	f := New(nil, nil)
	for _, entry := range []string{
		// The first init carried no cluster id, and layouts no format.
		`{"v":1,"op":"init","layout":{"name":"default","epoch_ms":1704067200000,"unit_ms":1,"time_bits":41,"group_bits":10,"seq_bits":12,"order":"time-group-seq"},"group":3}`,
		`{"v":1,"op":"reserve","up_to":4096}`,
		`{"v":1,"op":"confirm"}`,
		`{"v":1,"op":"set_node","node_id":"n1","grpc_addr":"127.0.0.1:7001"}`,
		`{"v":1,"op":"reserve","up_to":8192}`,
		`{"v":1,"op":"confirm"}`,
		`{"v":1,"op":"delete_node","node_id":"n1"}`,
	} {
		before := f.State()
		r := apply(t, f, []byte(entry), 1)
		if r.Err != nil {
			t.Fatalf("Apply(%s): %v", entry, r.Err)
		}
		if strings.Contains(entry, `"confirm"`) && !reflect.DeepEqual(f.State(), before) {
			t.Fatalf("a confirm changed the state from %+v to %+v", before, f.State())
		}
	}
	if err := f.Unreadable(); err != nil {
		t.Fatalf("Unreadable() = %v after entries every version wrote", err)
	}
	if hw := f.HighWater(); hw != 8192 {
		t.Fatalf("high-water %d, want 8192", hw)
	}
	snapshotBytes(t, f)
}

// Apply must answer a raft.Log that carries no command (nil Data, as a
// no-op entry would) with an error, not a panic.
func TestApplyLogWithoutData(t *testing.T) {
	f := populated(t)
	want := f.State()
	r := apply(t, f, nil, 3)
	if !errors.Is(r.Err, ErrMalformed) || r.Term != 3 {
		t.Errorf("Apply(nil Data) = %+v, want ErrMalformed in term 3", r)
	}
	if got := f.State(); !reflect.DeepEqual(got, want) {
		t.Errorf("Apply(nil Data) changed state: %+v, want %+v", got, want)
	}
}

// Replaying the log must not depend on the replaying node's clock: an init
// whose epoch lies after today's date is still a valid entry.
func TestDecodeInitIgnoresClock(t *testing.T) {
	future := layout.MustPreset("default")
	future.Name = "custom"
	future.EpochMs = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	if _, err := Decode(mustEncode(t, Command{Op: OpInit, Layout: &future, Group: 1})); err != nil {
		t.Fatalf("Decode of init with epoch in 2200: %v", err)
	}
}

func TestEncodeStampsVersion(t *testing.T) {
	b := mustEncode(t, Command{Version: 99, Op: OpDeleteNode, NodeID: "gone"})
	c, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode(%s): %v", b, err)
	}
	if c.Version != Version {
		t.Errorf("Version = %d, want %d", c.Version, Version)
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, c := range validCommands(t) {
		b := mustEncode(t, c)
		got, err := Decode(b)
		if err != nil {
			t.Errorf("Decode(%s): %v", b, err)
			continue
		}
		c.Version = Version
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip of %s: got %+v, want %+v", b, got, c)
		}
	}
}

func validCommands(t testing.TB) []Command {
	def := layout.MustPreset("default")
	sony := layout.MustPreset("sonyflake")
	return []Command{
		{Op: OpInit, Layout: &def},
		{Op: OpInit, Layout: &def, Group: 1023},
		{Op: OpInit, Layout: &sony, Group: 65535},
		{Op: OpReserve, UpTo: 1},
		{Op: OpReserve, UpTo: ^uint64(0)},
		{Op: OpDeleteNode, NodeID: "gone"},
		{Op: OpSetNode, NodeID: "node-1", GRPCAddr: "127.0.0.1:7000"},
		{Op: OpSetNode, NodeID: "ünïcode \"quoted\"", GRPCAddr: "[::1]:1"},
		{Op: OpDeleteNode, NodeID: "node-1"},
	}
}

// ---- fuzz ------------------------------------------------------------------

// FuzzDecode feeds arbitrary bytes to Decode and, as a raft.Log, to Apply
// on a fresh FSM and on one that already holds a layout, nodes and a
// high-water mark. Neither may panic. Decode refuses with an error that
// wraps a sentinel and no command; what it accepts re-encodes and decodes
// to the same command. Apply refuses exactly what Decode refuses, plus an
// init that contradicts the recorded layout; a refused command changes
// nothing; and whatever the bytes, the mark never goes down, Result
// reports it truthfully (Prev before, HighWater after), and a reserve
// leaves it at max(old, up_to).
func FuzzDecode(f *testing.F) {
	for _, c := range validCommands(f) {
		f.Add(mustEncode(f, c))
	}
	rejected, validNeighbour := rejectedCommands(f)
	for _, r := range rejected {
		f.Add([]byte(r.data))
	}
	f.Add([]byte(validNeighbour))
	f.Add([]byte(`{"v":1,"op":"init","layout":{"name":"x","epoch_ms":-5,"unit_ms":0,"time_bits":200,"group_bits":64,"seq_bits":0,"order":"?"},"group":18446744073709551615}`))
	f.Add([]byte(`{"v":1,"op":"reserve","up_to":5,"node_id":"n","layout":null}`))
	f.Add([]byte(`{"v":1,"op":"reserve","up_to":123455}`))
	f.Add([]byte(`{"v":1,"op":"reserve","up_to":123457}`))
	f.Add([]byte(`{"V":1,"OP":"delete_node","NODE_ID":"gone"}`))
	f.Add([]byte(`{"v":1,"op":"set_node","node_id":"\ud800","grpc_addr":"\u0000"}`))
	f.Add([]byte("{\"v\":1,\"op\":\"set_node\",\"node_id\":\"\xff\xfe\",\"grpc_addr\":\"a\"}"))
	f.Add([]byte(`{"v":1,"op":"delete_node","node_id":"gone","v":2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownVersion) &&
				!errors.Is(err, ErrUnknownOp) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode(%q) error %v wraps no sentinel", data, err)
			}
			if !reflect.DeepEqual(c, Command{}) {
				t.Fatalf("Decode(%q) returned %+v alongside error %v", data, c, err)
			}
		} else {
			if c.Version != Version {
				t.Fatalf("Decode(%q) accepted version %d", data, c.Version)
			}
			b, err := Encode(c)
			if err != nil {
				t.Fatalf("Encode(%+v) of accepted %q: %v", c, data, err)
			}
			c2, err := Decode(b)
			if err != nil {
				t.Fatalf("re-encoded %q (from %q) does not decode: %v", b, data, err)
			}
			if !reflect.DeepEqual(c, c2) {
				t.Fatalf("round trip of %q: %+v != %+v (via %s)", data, c, c2, b)
			}
		}

		for _, fsm := range []struct {
			name string
			f    *FSM
		}{{"fresh FSM", New(nil, nil)}, {"FSM with a mark", populated(t)}} {
			before := fsm.f.State()
			r := apply(t, fsm.f, data, 7)
			after := fsm.f.State()
			switch {
			case r.Term != 7:
				t.Fatalf("%s: Apply(%q).Term = %d, want 7", fsm.name, data, r.Term)
			case r.Prev != before.HighWater || r.HighWater != after.HighWater:
				t.Fatalf("%s: Apply(%q) reports Prev %d HighWater %d; the mark went from %d to %d",
					fsm.name, data, r.Prev, r.HighWater, before.HighWater, after.HighWater)
			case after.HighWater < before.HighWater:
				t.Fatalf("%s: Apply(%q) lowered the mark from %d to %d", fsm.name, data, before.HighWater, after.HighWater)
			case err != nil && unreadable(err) && (!errors.Is(r.Err, ErrUnreadable) || !strings.HasSuffix(r.Err.Error(), err.Error())):
				t.Fatalf("%s: Apply(%q).Err = %v, want ErrUnreadable with Decode's %v", fsm.name, data, r.Err, err)
			case err != nil && !unreadable(err) && (r.Err == nil || r.Err.Error() != err.Error()):
				t.Fatalf("%s: Apply(%q).Err = %v, want Decode's %v", fsm.name, data, r.Err, err)
			case (err != nil && unreadable(err)) != (fsm.f.Unreadable() != nil):
				t.Fatalf("%s: after Apply(%q), with Decode's %v, Unreadable() = %v", fsm.name, data, err, fsm.f.Unreadable())
			case err == nil && r.Err != nil && (before.Layout == nil || c.Op != OpInit || !errors.Is(r.Err, ErrLayoutMismatch)):
				// Only an init can meet a mismatch, and only once a
				// layout is recorded.
				t.Fatalf("%s: Apply(%q) refused what Decode accepted: %v", fsm.name, data, r.Err)
			case r.Err != nil && !reflect.DeepEqual(after, before):
				t.Fatalf("%s: refused Apply(%q) changed the state from %+v to %+v", fsm.name, data, before, after)
			case r.Err == nil && c.Op == OpReserve && after.HighWater != max(before.HighWater, c.UpTo):
				t.Fatalf("%s: reserve up to %d moved the mark from %d to %d", fsm.name, c.UpTo, before.HighWater, after.HighWater)
			case r.Err == nil && c.Op != OpReserve && after.HighWater != before.HighWater:
				t.Fatalf("%s: %s moved the mark from %d to %d", fsm.name, c.Op, before.HighWater, after.HighWater)
			}
		}
	})
}
