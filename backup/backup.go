// Package backup owns Ordo's disaster tools: the backup file (its format,
// checksum and checks), restoring a backup as the first node of a new
// cluster (Restore, with the jump of the high-water mark,
// RestoreHighWater, and the check that the old cluster is gone,
// CheckBackupAlive), and recovering a cluster that lost a majority for
// good (Recover). All of them run offline, on a data dir, before Raft
// starts.
//
// It does not own taking the copy (server's Backup call, on the leader),
// the data dir's format and checks, or how a node reads what a peer's data
// dir holds (package startup, which it builds on). Like startup, it reads
// durable state only, never a running node's FSM, and it must not import
// server: server and cmd/ordo wire it. A restored or recovered node's id
// and addresses pass the checks the Admin service applies
// (grpcapi.CheckNodeID and CheckDialAddr), so that no node is restored
// under one it would refuse.
package backup

// Backup and restore.
//
// A backup is the replicated state (fsm.State), copied on the leader after
// a Barrier, so that every committed entry is applied, and confirmed by a
// round of term messages (leadership.Confirmer.Confirm, in server), so
// that a leader deposed without knowing it cannot hand out an old copy.
//
// Why the backup covers every ID handed out before it: a tick is handed
// out only below a reservation committed before it (see package sequencer), and
// the high-water mark is the largest committed reservation, so it is above
// the tick of every ID any leader handed out. Reservations of earlier
// terms are in the log before the Barrier, so they are applied when the
// state is read; and no newer leader had been elected when the round that
// follows the read reached a majority, so none had handed out anything.
//
// A restore builds the data dir of the first node of a new cluster, with a
// new cluster id, offline. The old cluster may have handed out IDs after
// the backup, which the backup cannot know; RestoreHighWater jumps the
// mark far enough ahead of both the backup and the wall clock that every
// such ID is below it, while the old cluster's clocks were sane.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/internal/strictjson"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/startup"
)

// backupVersion is the backup file format this Ordo writes. It reads
// version 1 too, which lacks the old leader's bounds: a restore then takes
// its own --reserve-window for the old cluster's, as before; and version
// 2, which lacks the settled mark; and version 3, which lacks named
// sequences.
const backupVersion = 4

// File is a backup as written to disk: versioned JSON, with a
// SHA-256 checksum of its content.
type File struct {
	// Version is the file format (backupVersion when written here).
	Version int `json:"version"`
	// Created is the leader's clock when it took the copy (RFC 3339, UTC).
	Created string `json:"created"`
	// ClusterID is the backed-up cluster's id, which a restore replaces.
	ClusterID string `json:"cluster_id"`
	// Layout is the canonical layout spec, as --layout takes it.
	Layout string `json:"layout"`
	// Group is the cluster's group, which a restored node must serve.
	Group uint64 `json:"group"`
	// HighWater is the high-water mark in ticks, in decimal: a JSON number
	// above 2^53 loses precision in many tools.
	HighWater string `json:"high_water"`
	// HighWaterTime is the start of the mark's time unit, for people.
	HighWaterTime string `json:"high_water_time"`
	// Members maps each member's id to its gRPC address.
	Members map[string]string `json:"members"`
	// LeaderID, Term and Index say which leader took the copy, in which
	// term, at which applied index: for people, and for telling copies
	// apart.
	LeaderID string `json:"leader_id"`
	Term     uint64 `json:"term"`
	Index    uint64 `json:"index"`
	// ReserveWindowMs, LeadBound (ticks, in decimal) and MaxCount are the
	// leader's settings that bound how far past HighWater the old cluster
	// could hand out IDs after the copy (version 2 on).
	ReserveWindowMs int64  `json:"reserve_window_ms,omitempty"`
	LeadBound       string `json:"lead_bound,omitempty"`
	MaxCount        uint64 `json:"max_count,omitempty"`
	// Watermark is the settled mark W in ticks, in decimal (version 3
	// on). A restored cluster starts with W at its restored high-water
	// mark, above it: W never goes down across a restore.
	Watermark string `json:"watermark,omitempty"`
	// Sequences are the named sequences with their marks (version 4 on).
	Sequences []SequenceCopy `json:"sequences,omitempty"`
	// Checksum is "sha256:" and the hex SHA-256 of the compact JSON of
	// every other field, in this order, with checksum left out.
	Checksum string `json:"checksum,omitempty"`
}

// NewFile builds the file content from a Backup response.
func NewFile(r *api.BackupResponse) (*File, error) {
	l, err := layout.Parse(r.Layout)
	if err != nil {
		return nil, fmt.Errorf("%w: layout %q: %v", ErrBadBackup, r.Layout, err)
	}
	created := time.UnixMilli(r.TakenUnixMs).UTC()
	b := &File{
		Version:         backupVersion,
		Created:         created.Format(time.RFC3339Nano),
		ClusterID:       r.ClusterId,
		Layout:          l.String(),
		Group:           r.Group,
		HighWater:       strconv.FormatUint(r.HighWater, 10),
		HighWaterTime:   l.TickTime(r.HighWater).Format(time.RFC3339Nano),
		Members:         maps.Clone(r.Members),
		LeaderID:        r.LeaderId,
		Term:            r.Term,
		Index:           r.AppliedIndex,
		ReserveWindowMs: r.ReserveWindowMs,
		LeadBound:       strconv.FormatUint(r.LeadBoundTicks, 10),
		MaxCount:        r.MaxCount,
		Watermark:       strconv.FormatUint(r.WatermarkTick, 10),
	}
	for _, s := range r.Sequences {
		sc := SequenceCopy{Name: s.Name, Kind: s.Kind, Group: s.Group, Start: s.Start,
			Next: strconv.FormatUint(s.Next, 10), Dropped: s.Dropped}
		if w, ok := r.SequenceWatermarks[s.Name]; ok {
			sc.Watermark = strconv.FormatUint(w, 10)
		}
		b.Sequences = append(b.Sequences, sc)
	}
	if b.Members == nil {
		b.Members = map[string]string{}
	}
	if _, err := b.check(); err != nil {
		return nil, err
	}
	sum, err := b.sum()
	if err != nil {
		return nil, err
	}
	b.Checksum = sum
	return b, nil
}

// sum is the checksum of b's content, whatever b.Checksum holds.
func (b File) sum() (string, error) {
	b.Checksum = ""
	data, err := json.Marshal(b)
	if err != nil {
		return "", fmt.Errorf("encode backup: %w", err)
	}
	h := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(h[:]), nil
}

// backupContent is what a backup file says, parsed.
type backupContent struct {
	layout    layout.Layout
	highWater uint64
	created   time.Time
	// window and lead are the old leader's bounds; 0 in version 1.
	window time.Duration
	lead   uint64
	// sequences are the named sequences, as the state holds them.
	sequences map[string]*fsm.Sequence
}

// SequenceCopy is a named sequence in a backup file; Next in decimal.
type SequenceCopy struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Group   uint64 `json:"group,omitempty"`
	Start   uint64 `json:"start,omitempty"`
	Next    string `json:"next"`
	Dropped bool   `json:"dropped,omitempty"`
	// Watermark is the sequence's settled mark W, in decimal, at most
	// Next; absent from copies taken before named reservations. A
	// restored cluster starts the sequence's W at its restored mark,
	// above it, as it does the default sequence's.
	Watermark string `json:"watermark,omitempty"`
}

// sequencesOf checks a backup's sequences and returns them as the state
// holds them.
func sequencesOf(copies []SequenceCopy) (map[string]*fsm.Sequence, error) {
	if len(copies) == 0 {
		return nil, nil
	}
	m := make(map[string]*fsm.Sequence, len(copies))
	for _, sc := range copies {
		if err := fsm.CheckSequenceName(sc.Name); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadBackup, err)
		}
		seq, err := fsm.NewSequence(sc.Kind, sc.Group, sc.Start)
		if err != nil {
			return nil, fmt.Errorf("%w: sequence %q: %v", ErrBadBackup, sc.Name, err)
		}
		if seq.Next, err = strconv.ParseUint(sc.Next, 10, 64); err != nil {
			return nil, fmt.Errorf("%w: sequence %q: next %q: %v", ErrBadBackup, sc.Name, sc.Next, err)
		}
		if sc.Watermark != "" {
			if w, err := strconv.ParseUint(sc.Watermark, 10, 64); err != nil || w > seq.Next {
				return nil, fmt.Errorf("%w: sequence %q: watermark %q: want a value or tick at most its next %d", ErrBadBackup, sc.Name, sc.Watermark, seq.Next)
			}
		}
		if _, dup := m[sc.Name]; dup {
			return nil, fmt.Errorf("%w: sequence %q twice", ErrBadBackup, sc.Name)
		}
		seq.Dropped = sc.Dropped
		m[sc.Name] = &seq
	}
	return m, nil
}

// check parses and checks every field but the checksum.
func (b *File) check() (backupContent, error) {
	var c backupContent
	if b.Version < 1 || b.Version > backupVersion {
		return c, fmt.Errorf("%w: version %d, this Ordo reads versions 1 to %d", ErrBadBackup, b.Version, backupVersion)
	}
	if b.Version == 1 && (b.ReserveWindowMs != 0 || b.LeadBound != "" || b.MaxCount != 0) {
		return c, fmt.Errorf("%w: version 1 with version 2 fields", ErrBadBackup)
	}
	if b.Version < 4 && len(b.Sequences) > 0 {
		return c, fmt.Errorf("%w: version %d with named sequences, which version 4 added", ErrBadBackup, b.Version)
	}
	seqs, seqErr := sequencesOf(b.Sequences)
	if seqErr != nil {
		return c, seqErr
	}
	c.sequences = seqs
	if b.Version < 3 && b.Watermark != "" {
		return c, fmt.Errorf("%w: version %d with a watermark, which version 3 added", ErrBadBackup, b.Version)
	}
	var err error
	if c.created, err = time.Parse(time.RFC3339Nano, b.Created); err != nil {
		return c, fmt.Errorf("%w: created %q: %v", ErrBadBackup, b.Created, err)
	}
	if b.ClusterID == "" {
		return c, fmt.Errorf("%w: no cluster id", ErrBadBackup)
	}
	if c.layout, err = layout.Parse(b.Layout); err != nil {
		return c, fmt.Errorf("%w: layout %q: %v", ErrBadBackup, b.Layout, err)
	}
	if err := c.layout.CheckGroup(b.Group); err != nil {
		return c, fmt.Errorf("%w: %v", ErrBadBackup, err)
	}
	if c.highWater, err = strconv.ParseUint(b.HighWater, 10, 64); err != nil {
		return c, fmt.Errorf("%w: high_water %q: %v", ErrBadBackup, b.HighWater, err)
	}
	if b.Version >= 3 {
		w, err := strconv.ParseUint(b.Watermark, 10, 64)
		if err != nil || w > c.highWater {
			return c, fmt.Errorf("%w: watermark %q: want a tick at most the high-water mark %d", ErrBadBackup, b.Watermark, c.highWater)
		}
	}
	if b.Version >= 2 {
		if b.ReserveWindowMs <= 0 {
			return c, fmt.Errorf("%w: reserve_window_ms %d", ErrBadBackup, b.ReserveWindowMs)
		}
		c.window = time.Duration(b.ReserveWindowMs) * time.Millisecond
		if c.lead, err = strconv.ParseUint(b.LeadBound, 10, 64); err != nil {
			return c, fmt.Errorf("%w: lead_bound %q: %v", ErrBadBackup, b.LeadBound, err)
		}
	}
	return c, nil
}

// Marshal encodes b as indented JSON.
func (b *File) Marshal() ([]byte, error) {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode backup: %w", err)
	}
	return append(data, '\n'), nil
}

// parseFile decodes a backup and checks its version, checksum and
// fields; it refuses anything else.
func parseFile(data []byte) (*File, error) {
	var v struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrBadBackup, err)
	}
	if v.Version == nil {
		return nil, fmt.Errorf("%w: no version", ErrBadBackup)
	}
	if *v.Version < 1 || *v.Version > backupVersion {
		return nil, fmt.Errorf("%w: version %d, this Ordo reads versions 1 to %d", ErrBadBackup, *v.Version, backupVersion)
	}
	var b File
	if err := strictjson.Decode(bytes.NewReader(data), &b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadBackup, err)
	}
	want, err := b.sum()
	if err != nil {
		return nil, err
	}
	if b.Checksum != want {
		return nil, fmt.Errorf("%w: checksum mismatch (the file says %q, its content gives %q): the file is damaged or was edited", ErrBadBackup, b.Checksum, want)
	}
	if _, err := b.check(); err != nil {
		return nil, err
	}
	if b.Members == nil {
		b.Members = map[string]string{}
	}
	return &b, nil
}

// WriteFile writes b to path atomically: a temporary file in the
// same directory, mode 0600, synced, then renamed over path.
func WriteFile(path string, b *File) error {
	data, err := b.Marshal()
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write backup: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("write backup: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write backup: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write backup: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write backup: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write backup: %w", err)
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable where the OS allows it
		d.Close()
	}
	return nil
}

// ReadFile reads and checks a backup file.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read backup: %w", err)
	}
	b, err := parseFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// DefaultRestoreJump is how far past the backup and the clock a restored
// cluster starts, by default: far more than the clocks of NTP-synced
// nodes differ by. Not more: the restored cluster's IDs run ahead of the
// clock by the jump, and a leader hands out at most the lead bound's
// worth of the layout's capacity ahead of the clock it knows, so a long
// jump would throttle a busy cluster until the clock caught up.
const DefaultRestoreJump = time.Minute

// RestoreHighWater is the high-water mark a cluster restored from a backup
// starts at, so that its IDs are above every ID the old cluster handed
// out, before the backup and after it:
//
//	max(backup high-water, tick(backup taken), tick(now)) + ahead + jump
//
// where ahead = window + lead, window being the old cluster's reserve
// window and lead its lead bound, max(2·window, 10 s) of ticks unless a
// larger one is given (a backup records its leader's).
//
// Why. IDs handed out before the backup are below its high-water mark (see
// the top of this file). After the backup, the old cluster's leaders kept
// handing out ticks from max(last+1, tick(their clock)); a leader refuses
// a tick past its ceiling: max(2·window, 10 s) past the highest clock
// reading it has seen (sequencer.MaxLeadTicks), or the ceiling an earlier
// leader recorded, if later. The bound holds for a request's last tick,
// not only its first, so no request reaches past it; every reservation
// records its leader's ceiling, which grows only with a leader's own
// clock, and a backup records its leader's bound with the inherited
// ceiling and the one its state records counted (lead below: the
// leader's sequencer may not have served yet in its term, and lack the
// inherited one), so the ceilings of the leaders after it
// are within its clock plus lead, or their own clocks plus their bounds. So every tick the old cluster
// handed out is below max(its mark at the backup, its leaders' clocks) +
// ahead: the lead bound plus a window for the clocks' differences. The
// old cluster stopped before
// the restore runs, so its leaders' clocks read at most now + their skew
// against this host; jump covers that skew. tick(backup taken) counts the
// leader's clock at the backup, in case this host's clock is behind it.
//
// What it cannot protect against: an old cluster that still hands out IDs
// (restore refuses while its members answer, see CheckBackupAlive), and
// old leaders whose clocks ran ahead of this host by more than jump.
//
// The cost: the new cluster's IDs read up to jump+ahead in the future
// until the clock catches up. The restored state records the ceiling of
// a leader of the window whose clock reads the mark (fsm.State.ClockHigh,
// recordedAt), so the new cluster serves at once,
// but it hands out at most max(2·window, 10 s) of ticks beyond the mark
// (10 s of the layout's capacity with the defaults, however often the
// leader changes) before it answers sequencer.ErrAhead, until the clock
// catches up: see RestoreResult.AheadAllowance. A smaller jump shortens
// that time.
func RestoreHighWater(l layout.Layout, backupHW uint64, taken, now time.Time, jump, window time.Duration, lead uint64) (uint64, error) {
	if jump < 0 {
		return 0, fmt.Errorf("%w: jump %s is negative", startup.ErrBadConfig, jump)
	}
	if window <= 0 {
		window = DefaultReserveWindow
	}
	ahead := l.TicksIn(window) + max(sequencer.MaxLeadTicks(l, window), lead)
	base := max(backupHW, l.TickAt(taken), l.TickAt(now))
	hw := base + ahead + l.TicksIn(jump)
	if hw < base || hw > l.MaxTick() {
		return 0, fmt.Errorf("%w: the restored high-water mark would be past the layout's last tick %d (%s): the time field is exhausted",
			sequencer.ErrTimeExhausted, l.MaxTick(), l.TickTime(l.MaxTick()).Format(time.RFC3339))
	}
	return hw, nil
}

// recordedAt is what a reservation records (fsm.State.ClockHigh) for the
// ceiling of a leader of window whose clock reads tick: its ceiling, the
// lead bound past tick, less the least lead bound (see package
// sequencer, leadCeiling). A restore or a recovery records it at the
// mark it jumped to, so its leaders serve the lead bound of window past
// the mark, as leaders did when ClockHigh was a clock reading; not only
// the least bound past it.
func recordedAt(l layout.Layout, tick uint64, window time.Duration) uint64 {
	if window <= 0 {
		window = DefaultReserveWindow
	}
	return tick + sequencer.MaxLeadTicks(l, window) - sequencer.MaxLeadTicks(l, 0)
}

// recordedLead is how far past tick (a clock reading) the ceiling a
// state records (its ClockHigh plus the least lead bound) reaches: a
// leader elected on that state may hand out up to it, whatever its own
// window, so a restore's or recovery's lead counts it.
func recordedLead(l layout.Layout, clockHigh, tick uint64) uint64 {
	ceiling := clockHigh + sequencer.MaxLeadTicks(l, 0)
	return ceiling - min(ceiling, tick)
}

// CheckBackupAlive asks every member the backup names for its status,
// briefly, and refuses (ErrClusterAlive) unless each one is gone or shown
// not to be the old cluster. A member answers with the cluster id its data
// dir holds, which it knows from its start, before any leader is elected:
// so a restarted member of the old cluster that has no leader yet (a
// minority of it up) still counts, although it hands out nothing until a
// majority is back. A member that answers with Raft state but no cluster
// id cannot be told apart, and neither can one that accepts connections
// but cannot be asked (TLS without the flags, for one): both count as
// alive. Members that refuse connections or do not answer at all are
// taken to be gone: the operator must make sure they never start again
// with their data (see docs/operations.md, Backup and restore).
func CheckBackupAlive(ctx context.Context, b *File, t *secure.TLS) error {
	ask := startup.NewAsker(t)
	defer ask.Close()
	for id, a := range ask.NodeStatuses(ctx, b.Members) {
		addr, info := b.Members[id], a.Info
		var problem string
		switch {
		case a.Err == nil && info.ClusterId == b.ClusterID:
			problem = fmt.Sprintf("member %s at %s holds cluster %s (role %s, term %d)", id, addr, info.ClusterId, info.Role, info.Term)
		case a.Err == nil && info.ClusterId == "" && startup.PeerHasState(info):
			problem = fmt.Sprintf("member %s at %s holds Raft state of a cluster it cannot name (role %s, term %d)", id, addr, info.Role, info.Term)
		case a.Err == nil:
			// Another cluster, or a node without state: not the old cluster.
		case listens(ctx, addr):
			problem = fmt.Sprintf("member %s at %s accepts connections but could not be asked (%v); if the cluster uses TLS, give --tls-ca, --tls-cert and --tls-key", id, addr, a.Err)
		}
		if problem != "" {
			return fmt.Errorf("%w: %s. Two clusters handing out IDs from one backup would hand out the same IDs: stop every node of cluster %s first, or give --force if you are sure it can never hand out IDs again",
				ErrClusterAlive, problem, b.ClusterID)
		}
	}
	return nil
}

// listens reports whether something accepts TCP connections at addr.
func listens(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, startup.NodeStatusTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// RestoreOptions describe the first node of a cluster restored from a
// backup.
type RestoreOptions struct {
	// Backup is the checked backup to restore (ReadFile).
	Backup *File
	// DataDir must not hold Raft state.
	DataDir string
	// ID is the node's id; RaftAddr is the Raft address peers dial (serve's
	// --raft-advertise when it has one, else --raft-addr); GRPCAddr the
	// gRPC address others are told.
	ID, RaftAddr, GRPCAddr string
	// Jump and ReserveWindow are RestoreHighWater's; 0 ReserveWindow means
	// the default. Jump has no default here: give DefaultRestoreJump.
	Jump          time.Duration
	ReserveWindow time.Duration
	// DenseSkip is how far every dense sequence moves past its backed-up
	// mark: at least what the old cluster handed out after the backup.
	// Required when the backup has a dense sequence.
	DenseSkip uint64
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger; nil means none.
	Logger hclog.Logger
}

// RestoreResult is what Restore built.
type RestoreResult struct {
	// OldClusterID is the backed-up cluster's id, ClusterID the new one.
	OldClusterID, ClusterID string
	// BackupHighWater is the backup's mark, HighWater the restored one.
	BackupHighWater, HighWater uint64
	// Layout and Group are the backup's, which the node must be started
	// with.
	Layout layout.Layout
	Group  uint64
	// The restored mark is ahead of the clock, and a leader hands out
	// ticks at most max(2·window, 10 s) ahead of the highest clock reading
	// it knows (sequencer.MaxLeadTicks), and the restored mark counts as
	// one: so until AheadUntil, when the wall clock reaches the mark, the
	// new cluster hands out at most AheadAllowance ticks (IDs) in all,
	// then answers ResourceExhausted (sequencer.ErrAhead) until the clock
	// catches up. Computed with the restore's ReserveWindow, taken as the
	// new cluster's too.
	AheadAllowance uint64
	AheadUntil     time.Time
}

// Restore builds, offline, the data dir of the first node of a new cluster
// from a backup: a Raft snapshot of the backed-up state, with a new
// cluster id, the mark jumped (RestoreHighWater), and this node alone as
// its members and its Raft configuration; and term 1. The log stays empty,
// so a node that joins later is sent the snapshot, not a log without the
// state. Start the node on it (ordo serve, no --bootstrap) with the
// backup's layout and group; others join it.
//
// It refuses a data dir that holds Raft state. It does not check whether
// the old cluster still runs; CheckBackupAlive does.
func Restore(o RestoreOptions) (RestoreResult, error) {
	var res RestoreResult
	if o.Backup == nil {
		return res, fmt.Errorf("%w: no backup", ErrBadBackup)
	}
	c, err := o.Backup.check()
	if err != nil {
		return res, err
	}
	if err := grpcapi.CheckNodeID(o.ID); err != nil {
		return res, fmt.Errorf("%w: %w", startup.ErrBadConfig, err)
	}
	for _, a := range []string{o.RaftAddr, o.GRPCAddr} {
		if err := grpcapi.CheckDialAddr(a); err != nil {
			return res, fmt.Errorf("%w: %w", startup.ErrBadConfig, err)
		}
	}
	if o.DataDir == "" {
		return res, fmt.Errorf("%w: data dir is empty", startup.ErrBadConfig)
	}
	logger := o.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	has, err := startup.HasState(o.DataDir)
	if err != nil {
		return res, err
	}
	if has {
		return res, fmt.Errorf("%w: %s; restore builds a new node, give it an empty data dir", ErrHasState, o.DataDir)
	}
	// The old cluster's bounds: the larger of what the backup recorded
	// (its leader's settings) and what the operator says (another node
	// may have had a wider window).
	oldWindow := o.ReserveWindow
	if oldWindow <= 0 {
		oldWindow = DefaultReserveWindow
	}
	hw, err := RestoreHighWater(c.layout, c.highWater, c.created, now(), o.Jump, max(oldWindow, c.window), c.lead)
	if err != nil {
		return res, err
	}
	id, err := fsm.NewClusterID()
	if err != nil {
		return res, err
	}
	l := c.layout
	// The jump is a decision that time has reached the mark, so the new
	// cluster's leaders measure their lead from there: ClockHigh records
	// the ceiling of a leader of the window at the mark (recordedAt).
	st := fsm.State{
		HighWater: hw, ClockHigh: recordedAt(l, hw, oldWindow), MarkClock: hw, Layout: &l, Group: o.Backup.Group, ClusterID: id,
		Nodes: map[string]string{o.ID: o.GRPCAddr},
		// A new cluster of one node, this version: it reads what it
		// writes, and joiners are checked against it. W starts at the
		// mark: every ID the old cluster handed out is below it, and no
		// reservation of the old cluster can be completed here, so W
		// never goes down and never passes one that still can.
		ClusterVersion: fsm.Reads,
		Tracking:       fsm.Tracking{Settled: hw, Frontier: hw, Forgotten: hw},
		Sequences:      c.sequences,
	}
	// Every named sequence past what the old cluster may have handed out
	// after the copy, as the mark is (a dense one by the operator's skip).
	if err := st.JumpSequences(now(), o.Jump, o.DenseSkip); err != nil {
		return res, fmt.Errorf("%w: %w", ErrBadBackup, err)
	}
	// And each one's W at its restored mark, as the default sequence's:
	// its reservations in the old cluster are not known here.
	st.StartTrackingAtMarks()
	if err := writeRestoredState(o.DataDir, o.ID, o.RaftAddr, st, logger); err != nil {
		return res, err
	}
	// Read it back as a node would, to be sure of what was written.
	got, err := startup.StoredState(o.DataDir)
	if err != nil {
		return res, fmt.Errorf("read back the restored data dir: %w", err)
	}
	if got.HighWater != hw || got.ClusterID != id {
		return res, fmt.Errorf("read back the restored data dir: high-water %d cluster %s, wrote %d and %s", got.HighWater, got.ClusterID, hw, id)
	}
	res = RestoreResult{
		OldClusterID: o.Backup.ClusterID, ClusterID: id,
		BackupHighWater: c.highWater, HighWater: hw, Layout: l, Group: o.Backup.Group,
	}
	window := o.ReserveWindow
	if window <= 0 {
		window = DefaultReserveWindow
	}
	res.AheadAllowance = sequencer.MaxLeadTicks(l, window)
	res.AheadUntil = l.TickTime(hw)
	logger.Info("restored a new cluster from a backup",
		"old_cluster_id", res.OldClusterID, "cluster_id", id, "backup_created", o.Backup.Created,
		"backup_high_water", c.highWater, "high_water", hw, "jump", o.Jump, "node", o.ID, "data_dir", o.DataDir)
	return res, nil
}

// restoreSnapshotIndex and restoreTerm are the Raft index and term of the
// restored snapshot: the first a log can have, so the node's first
// election (term 2) and entries (index 2) follow it.
const (
	restoreSnapshotIndex = 1
	restoreTerm          = 1
)

// writeRestoredState writes st as the only snapshot in dataDir, with a
// configuration of this node alone, and sets the current term. On failure
// it removes what it wrote, so the data dir holds no Raft state.
func writeRestoredState(dataDir, id, raftAddr string, st fsm.State, logger hclog.Logger) (err error) {
	if err := startup.PrepareDataDir(dataDir, logger); err != nil {
		return err
	}
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	store, snaps, err := startup.OpenStores(dataDir, logger.Named("snapshot"))
	if err != nil {
		return err
	}
	defer func() {
		store.Close()
		if err != nil {
			// Nothing else was in it: HasState said so.
			os.Remove(filepath.Join(dataDir, startup.LogStoreFile))
			os.RemoveAll(filepath.Join(dataDir, "snapshots"))
		}
	}()
	cfg := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(raftAddr)}}}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(raftAddr)) // only encodes the legacy peer list
	defer trans.Close()
	sink, err := snaps.Create(raft.SnapshotVersionMax, restoreSnapshotIndex, restoreTerm, cfg, restoreSnapshotIndex, trans)
	if err != nil {
		return fmt.Errorf("create snapshot: %w", err)
	}
	if _, err := sink.Write(data); err != nil {
		sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	// Raft keeps its term before it takes a snapshot; startup.OpenStores refuses
	// snapshots without one.
	if err := store.SetUint64(startup.KeyCurrentTerm, restoreTerm); err != nil {
		return fmt.Errorf("write term: %w", err)
	}
	return nil
}
