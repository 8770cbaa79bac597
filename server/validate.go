package server

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/metrics"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
	"github.com/seed-e8569b35/ordo/startup"
)

// Bounds Validate holds Config's fields to, besides those that depend on
// the layout (ReserveWindow's least, MaxCount's most) or on another field.
const (
	// MaxReserveWindow bounds ReserveWindow. A new leader's first IDs may
	// run a window ahead of the clock, and a node restored from a backup
	// or recovered skips past one: a minute is twenty times what PD keeps
	// (3 s) and already far more than an idle cluster needs to commit
	// rarely (one reservation every half window).
	MaxReserveWindow = time.Minute
	// MinTimeout is the least RPCTimeout and ApplyTimeout: below it a
	// commit (a round trip and a disk write on a majority) times out
	// under any load.
	MinTimeout = 100 * time.Millisecond
	// MaxRPCTimeout and MaxApplyTimeout bound RPCTimeout and ApplyTimeout:
	// a call or a commit held longer holds a goroutine and its caller for
	// nothing.
	MaxRPCTimeout   = time.Hour
	MaxApplyTimeout = 10 * time.Minute
	// ConnsLimit is the largest MaxConnsPerHost but -1 (no limit).
	ConnsLimit = 1_000_000
	// MinRaftTimeout and MaxRaftTimeout bound Raft's heartbeat, election
	// and leader lease timeouts (Raft's own least is 5ms): a leader that
	// failed is replaced within about an election timeout, so a minute
	// is a minute without IDs.
	MinRaftTimeout = 10 * time.Millisecond
	MaxRaftTimeout = time.Minute
	// MinSnapshotInterval and MaxSnapshotInterval bound how often Raft
	// checks whether a snapshot is due.
	MinSnapshotInterval = 10 * time.Millisecond
	MaxSnapshotInterval = 24 * time.Hour
	// RaftEntriesLimit bounds Raft's SnapshotThreshold and TrailingLogs:
	// a hundred million entries are gigabytes of log.
	RaftEntriesLimit = 100_000_000
	// MinLease is the least Lease but 0 (off): a lease shorter than a
	// round of promises runs out before it is used.
	MinLease = 10 * time.Millisecond
)

// FieldError is a Config field Validate refuses. Its message names every
// field it mentions in braces, {ReserveWindow}, so that a caller that
// sets fields under other names (ordo serve sets them from its flags)
// can name them its way: Explain. It wraps startup.ErrBadConfig.
type FieldError struct {
	// Field is the field refused, as Go spells it from Config:
	// "ReserveWindow", "Raft.HeartbeatTimeout", "Reservations.MaxTTL".
	Field string
	// Msg says what is wrong with the field and what it takes instead,
	// naming fields in braces; it starts with the field's own name.
	Msg string
}

func (e *FieldError) Error() string {
	return startup.ErrBadConfig.Error() + ": " + e.Explain(nil)
}

func (e *FieldError) Unwrap() error { return startup.ErrBadConfig }

// Explain is the message with each field in braces named by name(field);
// a field name does not name (nil, or "" for it) keeps its Go name.
func (e *FieldError) Explain(name func(field string) string) string {
	var b strings.Builder
	rest := e.Msg
	for {
		open := strings.IndexByte(rest, '{')
		end := strings.IndexByte(rest[open+1:], '}')
		if open < 0 || end < 0 {
			b.WriteString(rest)
			return b.String()
		}
		field := rest[open+1 : open+1+end]
		b.WriteString(rest[:open])
		if n := ""; name != nil {
			if n = name(field); n != "" {
				field = n
			}
		}
		b.WriteString(field)
		rest = rest[open+1+end+1:]
	}
}

// badField is a FieldError for field whose message is "{field} " and
// format's.
func badField(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: "{" + field + "} " + fmt.Sprintf(format, args...)}
}

// ValidateAsGiven is Validate without the defaults: a zero field is
// checked as zero, where Validate takes it for the field's default. It is
// for a caller that sets every setting itself, as ordo serve does from
// its flags, so that a 0 it was given is refused rather than silently
// taken for the default. What no setting gives (a nil Raft, Clock or
// Logger, Reservations.Wall and Window) still takes its default.
func (c Config) ValidateAsGiven() error {
	return c.wired().check()
}

// check reports the first field out of its bounds, as a FieldError where
// one field is at fault; c is wired (Raft is not nil).
func (c Config) check() error {
	if err := grpcapi.CheckNodeID(c.ID); err != nil {
		if c.ID == "" {
			return badField("ID", "is empty: give this node's id, stable across restarts (1 to 64 letters, digits, '.', '_' or '-')")
		}
		_, why, ok := strings.Cut(err.Error(), fmt.Sprintf("node id %q: ", c.ID))
		if !ok {
			why = err.Error()
		}
		return badField("ID", "%q: %s", c.ID, why)
	}
	if c.DataDir == "" {
		return badField("DataDir", "is empty: give the directory of this node's Raft log, stable store and snapshots")
	}
	for _, a := range []struct {
		field, addr, example string
		dial, optional       bool
	}{
		{"RaftAddr", c.RaftAddr, "127.0.0.1:7101", false, false},
		{"RaftAdvertise", c.RaftAdvertise, "n1.example.internal:7101", true, true},
		{"GRPCAddr", c.GRPCAddr, "127.0.0.1:7001", false, false},
		{"GRPCAdvertise", c.GRPCAdvertise, "n1.example.internal:7001", true, true},
		{"HTTPAddr", c.HTTPAddr, "127.0.0.1:8080", false, true},
	} {
		if a.addr == "" && a.optional {
			continue
		}
		if err := checkAddr(a.field, a.addr, a.example, a.dial); err != nil {
			return err
		}
	}
	if err := c.Layout.Validate(c.Clock()); err != nil {
		return &FieldError{Field: "Layout", Msg: "{Layout}: " + err.Error()}
	}
	if err := c.Layout.CheckGroup(c.Group); err != nil {
		return &FieldError{Field: "Group", Msg: "{Group}: " + err.Error()}
	}
	if unit := time.Duration(c.Layout.UnitMs) * time.Millisecond; c.ReserveWindow < unit || c.ReserveWindow > MaxReserveWindow {
		return badField("ReserveWindow", "%s: want %s (one time unit of the layout) to %s", DurationText(c.ReserveWindow), DurationText(unit), DurationText(MaxReserveWindow))
	}
	if err := c.checkMaxCount(); err != nil {
		return err
	}
	if n := c.MetricsSequences; n < 1 || n > metrics.MaxSequenceSeries {
		return badField("MetricsSequences", "%d: want 1 to %d", n, metrics.MaxSequenceSeries)
	}
	r := c.Reservations
	switch {
	case r.MaxTTL < settle.MinTTL || r.MaxTTL > settle.TTLLimit:
		return badField("Reservations.MaxTTL", "%s: want %s to %s (a writer that vanished holds the settled mark back this long)", DurationText(r.MaxTTL), DurationText(settle.MinTTL), DurationText(settle.TTLLimit))
	case r.DefaultTTL < settle.MinTTL || r.DefaultTTL > r.MaxTTL:
		return badField("Reservations.DefaultTTL", "%s: want %s to {Reservations.MaxTTL} (%s)", DurationText(r.DefaultTTL), DurationText(settle.MinTTL), DurationText(r.MaxTTL))
	case r.MaxOpen < 1 || r.MaxOpen > settle.OpenLimit:
		return badField("Reservations.MaxOpen", "%d: want 1 to %d", r.MaxOpen, settle.OpenLimit)
	case c.ApplyTimeout < MinTimeout || c.ApplyTimeout > MaxApplyTimeout:
		return badField("ApplyTimeout", "%s: want %s to %s", DurationText(c.ApplyTimeout), DurationText(MinTimeout), DurationText(MaxApplyTimeout))
	case c.RPCTimeout < MinTimeout || c.RPCTimeout > MaxRPCTimeout:
		return badField("RPCTimeout", "%s: want %s to %s", DurationText(c.RPCTimeout), DurationText(MinTimeout), DurationText(MaxRPCTimeout))
	case c.MaxConnsPerHost == 0 || c.MaxConnsPerHost < -1 || c.MaxConnsPerHost > ConnsLimit:
		return badField("MaxConnsPerHost", "%d: want 1 to %d, or -1 for no limit", c.MaxConnsPerHost, ConnsLimit)
	}
	if err := checkRaft(c.Raft); err != nil {
		return err
	}
	switch {
	case c.Lease < 0 || c.Lease > 0 && c.Lease < MinLease:
		return badField("Lease", "%s: want %s or more (a round of promises takes longer than less), or 0 for no lease", DurationText(c.Lease), DurationText(MinLease))
	case c.Lease > 0 && c.Lease >= c.Raft.HeartbeatTimeout:
		// A follower stands for election once it has heard nothing for
		// the heartbeat timeout: a shorter lease has run out by then.
		return badField("Lease", "%s is not shorter than {Raft.HeartbeatTimeout} (%s): after a leader crash the next one would wait out its lease; shorten {Lease} or lengthen {Raft.HeartbeatTimeout}", DurationText(c.Lease), DurationText(c.Raft.HeartbeatTimeout))
	}
	// Raft's own checks and settle's see fields no setting gives.
	if err := raft.ValidateConfig(c.Raft); err != nil {
		return fmt.Errorf("%w: raft: %w", startup.ErrBadConfig, err)
	}
	if err := c.Reservations.Validate(); err != nil {
		return fmt.Errorf("%w: %w", startup.ErrBadConfig, err)
	}
	if c.TLS != nil {
		if leaf := c.TLS.Leaf(); leaf == nil || !secure.IsNode(leaf) {
			return &FieldError{Field: "TLS", Msg: "{TLS} is not a node certificate: a node serves TLS with a node certificate (with the serverAuth usage), not a client's"}
		}
	} else if !c.Insecure {
		for _, a := range []struct{ field, addr string }{{"RaftAddr", c.RaftAddr}, {"GRPCAddr", c.GRPCAddr}, {"HTTPAddr", c.HTTPAddr}} {
			if a.addr != "" && !isLoopback(a.addr) {
				return badField(a.field, "%q is not a loopback address and TLS is off: give a node certificate ({TLS}), or {Insecure} to serve plaintext anyway", a.addr)
			}
		}
	}
	for _, s := range c.AdminSubjects {
		if !strings.Contains(s, "=") {
			return badField("AdminSubjects", "%q: want a certificate subject as Go prints it, such as CN=ordo-admin or CN=ordo-admin,O=Example", s)
		}
	}
	return nil
}

// checkMaxCount bounds MaxCount: a request's last ID may be at most the
// lead bound ahead of the clock, so a larger count could never be
// served; and a request carries its count in 32 bits.
func (c Config) checkMaxCount() error {
	lead := sequencer.MaxLeadTicks(c.Layout, c.ReserveWindow)
	most := min(lead+1, c.Layout.MaxTick(), math.MaxUint32)
	switch {
	case c.MaxCount == 0:
		return badField("MaxCount", "0: want 1 to %d", most)
	case c.MaxCount > most && most == math.MaxUint32:
		return badField("MaxCount", "%d: want 1 to %d (a request carries its count in 32 bits)", c.MaxCount, most)
	case c.MaxCount > most:
		return badField("MaxCount", "%d is more IDs than the layout hands out in the lead bound (%d, %s of its capacity, the larger of twice {ReserveWindow} and 10s): lower {MaxCount} or widen {ReserveWindow}",
			c.MaxCount, most, DurationText(time.Duration(lead>>c.Layout.SeqBits)*time.Duration(c.Layout.UnitMs)*time.Millisecond))
	}
	return nil
}

// checkRaft bounds the Raft timers and log sizes a node's settings give.
func checkRaft(rc *raft.Config) error {
	hb := rc.HeartbeatTimeout
	switch {
	case hb < MinRaftTimeout || hb > MaxRaftTimeout:
		return badField("Raft.HeartbeatTimeout", "%s: want %s to %s", DurationText(hb), DurationText(MinRaftTimeout), DurationText(MaxRaftTimeout))
	case rc.ElectionTimeout < hb || rc.ElectionTimeout > MaxRaftTimeout:
		return badField("Raft.ElectionTimeout", "%s: want {Raft.HeartbeatTimeout} (%s) to %s", DurationText(rc.ElectionTimeout), DurationText(hb), DurationText(MaxRaftTimeout))
	case rc.LeaderLeaseTimeout < MinRaftTimeout || rc.LeaderLeaseTimeout > hb:
		return badField("Raft.LeaderLeaseTimeout", "%s: want %s to {Raft.HeartbeatTimeout} (%s)", DurationText(rc.LeaderLeaseTimeout), DurationText(MinRaftTimeout), DurationText(hb))
	case rc.SnapshotInterval < MinSnapshotInterval || rc.SnapshotInterval > MaxSnapshotInterval:
		return badField("Raft.SnapshotInterval", "%s: want %s to %s", DurationText(rc.SnapshotInterval), DurationText(MinSnapshotInterval), DurationText(MaxSnapshotInterval))
	case rc.SnapshotThreshold < 1 || rc.SnapshotThreshold > RaftEntriesLimit:
		return badField("Raft.SnapshotThreshold", "%d: want 1 to %d log entries", rc.SnapshotThreshold, RaftEntriesLimit)
	case rc.TrailingLogs > RaftEntriesLimit:
		return badField("Raft.TrailingLogs", "%d: want 0 to %d log entries", rc.TrailingLogs, RaftEntriesLimit)
	}
	return nil
}

// checkAddr refuses an address field that is not host:port (CheckAddr).
func checkAddr(field, addr, example string, dial bool) error {
	if addr == "" {
		return badField(field, "is empty: want host:port, such as %s", example)
	}
	if err := CheckAddr(addr, dial, example); err != nil {
		return badField(field, "%v", err)
	}
	return nil
}

// CheckAddr refuses an address that is not host:port: one a node binds
// (the host may be empty or a wildcard; port 0 picks a free one), or with
// dial one that others dial (a host that is not a wildcard, a port from
// 1). The error quotes addr and says what is wrong, offering example.
func CheckAddr(addr string, dial bool, example string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return fmt.Errorf("%q: the port is missing: want host:port, such as %s", addr, example)
		}
		return fmt.Errorf("%q is not host:port, such as %s (%v)", addr, example, err)
	}
	least := 0
	if dial {
		least = 1
	}
	if p, err := strconv.Atoi(port); err != nil || p < least || p > 65535 {
		return fmt.Errorf("%q: the port must be a number from %d to 65535", addr, least)
	}
	if ip := net.ParseIP(host); dial && (host == "" || ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("%q: a wildcard host cannot be dialed: give the name or IP others reach it at, such as %s", addr, example)
	}
	return nil
}

// DurationText is d as a flag takes it, without Go's trailing zero units:
// 1m, not 1m0s.
func DurationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
