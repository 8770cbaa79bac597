package verify

// Keyed clients (issue 25): with WorkloadConfig.Keyed, that many clients
// make every call for IDs of the default sequence with an idempotency key
// of its own (client.WithIdempotencyKey), and retry a call whose answer
// was lost (a timeout, a broken connection, a leader killed or cut off)
// with the same key until it is answered, so every key is answered once
// and every answer to it is the first. Each attempt is recorded in the
// run's history with its key, beside the other clients' calls, so the
// checker folds the attempts of a key into one call (history.Check:
// real-time order from the first attempt, a replay is no duplicate, an
// answer with other IDs is a key conflict), and a key's IDs are checked
// against everything else handed out. One answered call in reaskOneIn is
// asked again, straight from a random node, as another process naming
// the same caller would: the answer must be a replay.
//
// The fault kill-leader-before-answer (nemesis.go) ends the leader
// between a keyed call's commit and its answer, through ordo serve's
// --test-crash-before-keyed-answer, which leaves what was committed in
// the node's crash file: the run then requires that the key was answered
// afterwards with exactly those IDs (CrashCheck).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/layout"
)

// The crash file of ordo serve --test-crash-before-keyed-answer.
const (
	// CrashArm, written into a node's crash file, arms it: the next
	// keyed call the node commits as the leader ends the process before
	// its answer leaves.
	CrashArm = "arm"
	// CrashExitCode is the exit code of a node ended that way.
	CrashExitCode = 86
)

// CrashRecord is what a node writes over its crash file, as JSON, before
// it ends between a keyed call's commit and its answer: the call's
// caller, key and sequence ("" for the default), and the first tick (or
// value, of a dense sequence) and count committed under the key.
type CrashRecord struct {
	Caller string `json:"caller,omitempty"`
	Key    string `json:"key"`
	Seq    string `json:"seq,omitempty"`
	First  uint64 `json:"first"`
	Count  uint64 `json:"count"`
}

// keyedCaller is the name the keyed clients give as their caller
// (client.WithCaller); under TLS the cluster takes their certificate's
// subject instead. Their keys are unique to the run either way.
const keyedCaller = "ordo-verify-keyed"

// reaskOneIn: one answered keyed call in this many is asked again.
const reaskOneIn = 4

// keyedGrace is how long a keyed client keeps retrying its last key
// after the run ended, so that a key whose answer a fault lost near the
// end is still answered (the cluster serves again by then).
const keyedGrace = 5 * time.Second

// KeyedCounts is what the keyed clients did; the replays and the keys
// answered with other IDs are the history's (Report.Replays,
// Report.KeyConflicts).
type KeyedCounts struct {
	// Calls is the number of keys used, Attempts their attempts.
	Calls    int64 `json:"calls"`
	Attempts int64 `json:"attempts"`
	// Retried counts the keys answered after one or more attempts that
	// ended unknown (their answer lost); Unanswered the keys never
	// answered before the run ended.
	Retried    int64 `json:"retried"`
	Unanswered int64 `json:"unanswered"`
	// Refused counts the keys an attempt of which was refused, which
	// ends the key; Reused those refused as reused with other arguments,
	// which is a failure: every attempt asks what the first asked.
	Refused int64 `json:"refused"`
	Reused  int64 `json:"reused"`
	// ReAsked counts the answered keys asked again on one node.
	ReAsked int64 `json:"reasked"`
	// Crashes are the keyed calls a leader committed and ended before
	// answering (kill-leader-before-answer).
	Crashes []CrashCheck `json:"crashes,omitempty"`
}

// CrashCheck is what became of a keyed call a leader committed and ended
// before answering.
type CrashCheck struct {
	Node string `json:"node"`
	Key  string `json:"key"`
	// First and Count are the ticks committed under the key.
	First uint64 `json:"first"`
	Count uint64 `json:"count"`
	// Answered says an attempt with the key was answered; Matched that
	// every answer was exactly the committed ticks; Got sums up what the
	// answers held.
	Answered bool   `json:"answered"`
	Matched  bool   `json:"matched"`
	Got      string `json:"got,omitempty"`
}

// String is the check in words.
func (c CrashCheck) String() string {
	state := "the retry got exactly the committed IDs"
	switch {
	case !c.Answered:
		state = "NEVER ANSWERED after the crash"
	case !c.Matched:
		state = "ANSWERED WITH OTHER IDS: " + c.Got
	}
	return fmt.Sprintf("%s committed key %s (ticks %d..%d) and ended before answering: %s", c.Node, c.Key, c.First, c.First+c.Count-1, state)
}

// Failures is the number of things the keyed clients saw go wrong: keys
// refused as reused, and crashed calls not answered with what was
// committed.
func (k KeyedCounts) Failures() int64 {
	n := k.Reused
	for _, c := range k.Crashes {
		if !c.Matched {
			n++
		}
	}
	return n
}

// keyedCounters are KeyedCounts as the clients count them.
type keyedCounters struct {
	calls, retried, unanswered, refused, reused, reasked atomic.Int64

	mu      sync.Mutex
	crashes []crashed
}

// crashed is a crash record with the node that wrote it.
type crashed struct {
	node string
	rec  CrashRecord
}

// addCrash keeps what node committed before it ended.
func (k *keyedCounters) addCrash(node string, rec CrashRecord) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.crashes = append(k.crashes, crashed{node: node, rec: rec})
}

// startKeyed starts cfg.Keyed keyed clients, numbered from id; it
// returns the next number.
func (w *Workload) startKeyed(cfg WorkloadConfig, opts []client.Option, id int) (int, error) {
	if cfg.Keyed == 0 {
		return id, nil
	}
	w.keyed = true
	tag, err := runTag()
	if err != nil {
		return id, err
	}
	conns := make([]*grpc.ClientConn, 0, len(cfg.Addrs))
	for _, addr := range cfg.Addrs {
		conn, err := dial(addr, cfg.TLS)
		if err != nil {
			return id, err
		}
		conns = append(conns, conn)
	}
	var users sync.WaitGroup
	users.Add(cfg.Keyed)
	go func() {
		users.Wait()
		for _, conn := range conns {
			conn.Close()
		}
	}()
	for i := range cfg.Keyed {
		c, err := client.New(cfg.Addrs, append(opts, client.WithUnary(), client.WithCaller(keyedCaller))...)
		if err != nil {
			users.Add(i - cfg.Keyed) // the clients not started
			return id, err
		}
		next := narrow(c.NextN)
		if cfg.Layout.Wide() {
			next = wideNext(c, cfg.Layout)
		}
		k := keyedClient{w: w, id: id, tag: tag, maxCount: cfg.MaxCount, next: next, conns: conns, lay: cfg.Layout, group: cfg.Group}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer users.Done()
			defer c.Close()
			k.run()
		}()
		id++
	}
	return id, nil
}

// runTag is a random prefix for the run's keys: a cluster keeps keys for
// good (up to its cap), so a second run against it must not reuse them.
func runTag() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make a key prefix: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// keyedClient is one keyed client.
type keyedClient struct {
	w        *Workload
	id       int
	tag      string
	maxCount int
	next     nextFunc
	// conns are connections to every node, for asking keys again.
	conns []*grpc.ClientConn
	lay   layout.Layout
	group uint64
}

// run makes keyed calls until the workload stops.
func (k keyedClient) run() {
	rng := mrand.New(mrand.NewPCG(uint64(k.id), 0x6b6579))
	c := history.Caller{Rec: k.w.rec, Tally: &k.w.keyedTally, Client: k.id, Judge: keyedJudge}
	for seq := 0; !k.w.stopped(); seq++ {
		key := fmt.Sprintf("%s-%d-%d", k.tag, k.id, seq)
		n := 1 + rng.IntN(k.maxCount)
		if k.call(c, key, n, rng) && rng.IntN(reaskOneIn) == 0 {
			k.reask(c, key, n, k.conns[rng.IntN(len(k.conns))])
		}
	}
}

// call makes the keyed call key for n IDs, one attempt at a time, until
// it is answered, refused, or keyedGrace after the workload stopped; it
// reports whether it was answered.
func (k keyedClient) call(c history.Caller, key string, n int, rng *mrand.Rand) bool {
	counts := &k.w.keyedCounts
	counts.calls.Add(1)
	var giveUp time.Time
	for attempt := 0; ; attempt++ {
		if k.w.stopped() {
			if giveUp.IsZero() {
				giveUp = time.Now().Add(keyedGrace)
			} else if time.Now().After(giveUp) {
				counts.unanswered.Add(1)
				return false
			}
		}
		ctx, cancel := context.WithTimeout(client.WithIdempotencyKey(context.Background(), key), opTimeout)
		end, err := k.w.callKeyed(c, key, n, func() ([]uint64, []string, error) { return k.next(ctx, n) })
		cancel()
		switch end {
		case history.Answered:
			if attempt > 0 {
				counts.retried.Add(1)
			}
			return true
		case history.Uncertain:
			time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
			continue
		case history.Refused:
			counts.refused.Add(1)
			if errors.Is(err, client.ErrKeyReused) {
				counts.reused.Add(1)
			}
		}
		return false // refused, or an answer withheld (counted as bad)
	}
}

// reask asks for key again, once, straight from the node at conn, as a
// client of another process naming the same caller would: it must be
// answered with the key's first answer.
func (k keyedClient) reask(c history.Caller, key string, n int, conn *grpc.ClientConn) {
	k.w.keyedCounts.reasked.Add(1)
	ctx := metadata.AppendToOutgoingContext(context.Background(), api.CallerKey, keyedCaller)
	req := &api.NextRequest{Count: uint32(n), IdempotencyKey: key}
	k.w.callKeyed(c, key, n, func() ([]uint64, []string, error) {
		return nodeAsk(ctx, api.NewSequencerClient(conn), k.lay, k.group, req)
	})
}

// keyedJudge is judge for keyed calls: a replay below what the client
// had returned when the call began, which the client withholds, breaks
// the order promise of keyed calls, so it is a bad answer.
func keyedJudge(err error) history.Ending {
	if errors.Is(err, client.ErrReplayBelowFloor) {
		return history.BadAnswer
	}
	return judge(err)
}

// keyedCountsOf is what the keyed clients did, with every crash record
// checked against ops, the run's history: the key's answers must all be
// exactly the ticks committed.
func (w *Workload) keyedCountsOf(ops []history.Op) KeyedCounts {
	k := &w.keyedCounts
	t := w.keyedTally.Counts()
	out := KeyedCounts{
		Calls: k.calls.Load(), Attempts: t.OK + t.Failed + t.Unknown + t.Bad,
		Retried: k.retried.Load(), Unanswered: k.unanswered.Load(), Refused: k.refused.Load(), Reused: k.reused.Load(), ReAsked: k.reasked.Load(),
	}
	k.mu.Lock()
	crashes := slices.Clone(k.crashes)
	k.mu.Unlock()
	for _, cr := range crashes {
		out.Crashes = append(out.Crashes, checkCrash(cr, ops, w.lay))
	}
	return out
}

// checkCrash checks that the key of a crashed call was answered with the
// ticks committed under it, and with nothing else.
func checkCrash(cr crashed, ops []history.Op, lay layout.Layout) CrashCheck {
	c := CrashCheck{Node: cr.node, Key: cr.rec.Key, First: cr.rec.First, Count: cr.rec.Count, Matched: true}
	want := make([]uint64, cr.rec.Count)
	for i := range want {
		want[i] = cr.rec.First + uint64(i)
	}
	var got []string
	for _, op := range ops {
		if op.Key != cr.rec.Key || op.Outcome != history.OK {
			continue
		}
		c.Answered = true
		ticks := op.IDs // a 128-bit layout's are recorded as ticks
		if !lay.Wide() {
			ticks = make([]uint64, len(op.IDs))
			for i, id := range op.IDs {
				ticks[i] = lay.Tick(id)
			}
		}
		if !slices.Equal(ticks, want) {
			c.Matched = false
			got = append(got, fmt.Sprintf("client %d at %.3fs: %s", op.Client, op.End.Seconds(), tickSpan(ticks)))
		}
	}
	c.Matched = c.Matched && c.Answered
	c.Got = strings.Join(got, "; ")
	return c
}

// tickSpan sums up ticks.
func tickSpan(ticks []uint64) string {
	if len(ticks) == 0 {
		return "no IDs"
	}
	return fmt.Sprintf("%d IDs of ticks %d..%d", len(ticks), ticks[0], ticks[len(ticks)-1])
}

// readCrash reads the record node n wrote over its crash file.
func readCrash(n *Node) (CrashRecord, error) {
	var rec CrashRecord
	b, err := os.ReadFile(n.CrashFile)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.Key == "" || rec.Count == 0 {
		return rec, fmt.Errorf("%s's crash file holds no record of a committed keyed call: %q", n.Name, truncate(string(b), 200))
	}
	return rec, nil
}

// keyedSummary is the keyed clients' line of the report, and one line a
// crash.
func keyedSummary(k KeyedCounts, r history.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "keyed: %d calls in %d attempts, %d answered after a lost attempt, %d unanswered at the end, %d refused (%d as reused); %d asked again on one node, %d answers replayed, %d answered with other IDs\n",
		k.Calls, k.Attempts, k.Retried, k.Unanswered, k.Refused, k.Reused, k.ReAsked, r.Replays, r.KeyConflicts)
	for _, c := range k.Crashes {
		fmt.Fprintf(&b, "  crash before answer: %s\n", c)
	}
	return b.String()
}
