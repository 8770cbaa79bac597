package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/secure/securetest"
	"github.com/seed-e8569b35/ordo/settle"
	"github.com/seed-e8569b35/ordo/startup"
)

// TestConfigMetricsSequences: the per-sequence series name 1 to 1000
// sequences (0 is the default); anything else is refused at start,
// naming the range.
func TestConfigMetricsSequences(t *testing.T) {
	for _, tt := range []struct {
		n  int
		ok bool
	}{{0, true}, {1, true}, {1000, true}, {-1, false}, {1001, false}} {
		cfg := testConfig(t, "n1", t.TempDir())
		cfg.MetricsSequences = tt.n
		err := cfg.Validate()
		if tt.ok != (err == nil) || !tt.ok && (!errors.Is(err, startup.ErrBadConfig) || !strings.Contains(err.Error(), "want 1 to 1000")) {
			t.Errorf("metrics sequences %d: %v, want ok %v", tt.n, err, tt.ok)
		}
	}
}

// TestConfigMaxCountFitsTheLeadBound: a request's last ID may be at most the
// lead bound ahead of the clock, so a --max-count larger than the bound
// holds could never be served and is refused at start; every preset takes
// the default, sonyflake (the least capacity) included.
func TestConfigMaxCountFitsTheLeadBound(t *testing.T) {
	for _, tt := range []struct {
		preset   string
		window   time.Duration
		maxCount uint64
		ok       bool
	}{
		{"default", 0, DefaultMaxCount, true},
		{"sonyflake", 0, DefaultMaxCount, true},
		{"sonyflake", 0, 256_001, true},  // 10 s of 25,600 IDs/s, plus the first
		{"sonyflake", 0, 256_002, false}, // one more
		{"sonyflake", time.Minute, 1_000_000, true},
	} {
		cfg := testConfig(t, "n1", t.TempDir())
		cfg.Layout, cfg.ReserveWindow, cfg.MaxCount = layout.MustPreset(tt.preset), tt.window, tt.maxCount
		err := cfg.Validate()
		if tt.ok && err != nil {
			t.Errorf("%s, window %s, max count %d: %v", tt.preset, tt.window, tt.maxCount, err)
		}
		var fe *FieldError
		if !tt.ok && (!errors.Is(err, startup.ErrBadConfig) || !errors.As(err, &fe) || fe.Field != "MaxCount") {
			t.Errorf("%s, window %s, max count %d: %v, want startup.ErrBadConfig naming the max count", tt.preset, tt.window, tt.maxCount, err)
		}
	}
}

// TestClockOffsetShiftsTheClockOnce: TestHooks.ClockOffset is added to
// Config.Clock, once: a Config handed on after its defaults were applied
// is not shifted again. Without the hook the clock is left alone.
func TestClockOffsetShiftsTheClockOnce(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := Config{Clock: func() time.Time { return base }}
	cfg.TestHooks.ClockOffset = func() time.Duration { return -time.Hour }
	once := cfg.withDefaults()
	if got := once.Clock(); !got.Equal(base.Add(-time.Hour)) {
		t.Fatalf("clock with a -1h offset reads %s, want %s", got, base.Add(-time.Hour))
	}
	if got := once.withDefaults().Clock(); !got.Equal(base.Add(-time.Hour)) {
		t.Fatalf("clock after defaults twice reads %s, want %s", got, base.Add(-time.Hour))
	}
	if got := (Config{Clock: func() time.Time { return base }}).withDefaults().Clock(); !got.Equal(base) {
		t.Fatalf("clock without hooks reads %s, want %s", got, base)
	}
}

// givenConfig is testConfig with every setting given, as ordo serve gives
// them from its flags' defaults.
func givenConfig(t *testing.T) Config {
	cfg := testConfig(t, "n1", t.TempDir())
	cfg.ReserveWindow, cfg.MaxCount, cfg.MetricsSequences = DefaultReserveWindow, DefaultMaxCount, 20
	cfg.Reservations = settle.Config{DefaultTTL: settle.DefaultTTL, MaxTTL: settle.DefaultMaxTTL, MaxOpen: settle.DefaultMaxOpen}
	cfg.ApplyTimeout, cfg.RPCTimeout, cfg.MaxConnsPerHost = DefaultApplyTimeout, DefaultRPCTimeout, DefaultMaxConnsPerHost
	return cfg
}

// TestConfigFieldBounds: every setting out of its bounds is refused with
// a FieldError naming it (so ordo serve can name its flag), zeros
// included when the config is taken as given; a value at each bound is
// accepted. A heartbeat timeout of 0 is the heartbeat's fault, not the
// lease's; a negative election timeout names the election timeout, not
// Raft's "ElectionTimeout is too low".
func TestConfigFieldBounds(t *testing.T) {
	pki := securetest.New(t, "ca")
	for _, tt := range []struct {
		name  string
		set   func(c *Config)
		field string // "" when valid
	}{
		{"as given", func(c *Config) {}, ""},
		{"no id", func(c *Config) { c.ID = "" }, "ID"},
		{"bad id", func(c *Config) { c.ID = "a b" }, "ID"},
		{"no data dir", func(c *Config) { c.DataDir = "" }, "DataDir"},
		{"raft addr without a port", func(c *Config) { c.RaftAddr = "foo" }, "RaftAddr"},
		{"grpc addr without a port", func(c *Config) { c.GRPCAddr = "foo" }, "GRPCAddr"},
		{"grpc addr port out of range", func(c *Config) { c.GRPCAddr = "127.0.0.1:70000" }, "GRPCAddr"},
		{"http addr without a port", func(c *Config) { c.HTTPAddr = "localhost" }, "HTTPAddr"},
		{"wildcard raft advertise", func(c *Config) { c.RaftAdvertise = "0.0.0.0:7101" }, "RaftAdvertise"},
		{"grpc advertise port 0", func(c *Config) { c.GRPCAdvertise = "n1.example:0" }, "GRPCAdvertise"},
		{"grpc advertise a name", func(c *Config) { c.GRPCAdvertise = "n1.example:7001" }, ""},
		{"group too large", func(c *Config) { c.Group = 1 << 40 }, "Group"},
		{"window 0", func(c *Config) { c.ReserveWindow = 0 }, "ReserveWindow"},
		{"window negative", func(c *Config) { c.ReserveWindow = -time.Second }, "ReserveWindow"},
		{"window at most", func(c *Config) { c.ReserveWindow = MaxReserveWindow }, ""},
		{"window above", func(c *Config) { c.ReserveWindow = MaxReserveWindow + time.Millisecond }, "ReserveWindow"},
		{"max count 0", func(c *Config) { c.MaxCount = 0 }, "MaxCount"},
		{"max count above 32 bits", func(c *Config) { c.MaxCount = 1 << 32 }, "MaxCount"},
		{"metrics sequences 0", func(c *Config) { c.MetricsSequences = 0 }, "MetricsSequences"},
		{"reservation ttl 0", func(c *Config) { c.Reservations.DefaultTTL = 0 }, "Reservations.DefaultTTL"},
		{"reservation ttl above max", func(c *Config) { c.Reservations.DefaultTTL = 2 * time.Hour }, "Reservations.DefaultTTL"},
		{"max reservation ttl 0", func(c *Config) { c.Reservations.MaxTTL, c.Reservations.DefaultTTL = 0, 0 }, "Reservations.MaxTTL"},
		{"max reservation ttl 25h", func(c *Config) { c.Reservations.MaxTTL = 25 * time.Hour }, "Reservations.MaxTTL"},
		{"max open 0", func(c *Config) { c.Reservations.MaxOpen = 0 }, "Reservations.MaxOpen"},
		{"apply timeout 0", func(c *Config) { c.ApplyTimeout = 0 }, "ApplyTimeout"},
		{"apply timeout 1h", func(c *Config) { c.ApplyTimeout = time.Hour }, "ApplyTimeout"},
		{"rpc timeout 0", func(c *Config) { c.RPCTimeout = 0 }, "RPCTimeout"},
		{"rpc timeout 1ms", func(c *Config) { c.RPCTimeout = time.Millisecond }, "RPCTimeout"},
		{"rpc timeout 1h", func(c *Config) { c.RPCTimeout = MaxRPCTimeout }, ""},
		{"conns 0", func(c *Config) { c.MaxConnsPerHost = 0 }, "MaxConnsPerHost"},
		{"conns -2", func(c *Config) { c.MaxConnsPerHost = -2 }, "MaxConnsPerHost"},
		{"conns -1", func(c *Config) { c.MaxConnsPerHost = -1 }, ""},
		{"heartbeat 0", func(c *Config) { c.Raft.HeartbeatTimeout = 0 }, "Raft.HeartbeatTimeout"},
		{"heartbeat 2m", func(c *Config) { c.Raft.HeartbeatTimeout, c.Raft.ElectionTimeout = 2*time.Minute, 2*time.Minute }, "Raft.HeartbeatTimeout"},
		{"election negative", func(c *Config) { c.Raft.ElectionTimeout = -time.Second }, "Raft.ElectionTimeout"},
		{"election below heartbeat", func(c *Config) { c.Raft.ElectionTimeout = c.Raft.HeartbeatTimeout - time.Millisecond }, "Raft.ElectionTimeout"},
		{"leader lease 0", func(c *Config) { c.Raft.LeaderLeaseTimeout = 0 }, "Raft.LeaderLeaseTimeout"},
		{"leader lease above heartbeat", func(c *Config) { c.Raft.LeaderLeaseTimeout = c.Raft.HeartbeatTimeout + 1 }, "Raft.LeaderLeaseTimeout"},
		{"snapshot interval 0", func(c *Config) { c.Raft.SnapshotInterval = 0 }, "Raft.SnapshotInterval"},
		{"snapshot threshold 0", func(c *Config) { c.Raft.SnapshotThreshold = 0 }, "Raft.SnapshotThreshold"},
		{"trailing logs 0", func(c *Config) { c.Raft.TrailingLogs = 0 }, ""},
		{"trailing logs too many", func(c *Config) { c.Raft.TrailingLogs = RaftEntriesLimit + 1 }, "Raft.TrailingLogs"},
		{"lease 5ms", func(c *Config) { c.Lease = 5 * time.Millisecond }, "Lease"},
		{"lease at heartbeat", func(c *Config) { c.Lease = c.Raft.HeartbeatTimeout }, "Lease"},
		{"lease below heartbeat", func(c *Config) { c.Lease = c.Raft.HeartbeatTimeout - time.Millisecond }, ""},
		{"heartbeat 0 with no lease", func(c *Config) { c.Raft.HeartbeatTimeout, c.Lease = 0, 0 }, "Raft.HeartbeatTimeout"},
		{"client certificate", func(c *Config) { c.TLS = securetest.MustLoad(t, pki.Client("not-a-node")) }, "TLS"},
		{"plaintext elsewhere", func(c *Config) { c.GRPCAddr = "10.1.2.3:7001" }, "GRPCAddr"},
		{"admin subject without =", func(c *Config) { c.AdminSubjects = []string{"ordo-admin"} }, "AdminSubjects"},
		{"admin subject", func(c *Config) { c.AdminSubjects = []string{"CN=ordo-admin,O=Example"} }, ""},
	} {
		cfg := givenConfig(t)
		tt.set(&cfg)
		err := cfg.ValidateAsGiven()
		if tt.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.Is(err, startup.ErrBadConfig) || !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%s: %v, want a FieldError naming %s", tt.name, err, tt.field)
			continue
		}
		if !strings.HasPrefix(fe.Msg, "{"+tt.field+"}") {
			t.Errorf("%s: message %q does not start with the field", tt.name, fe.Msg)
		}
	}
}

// TestConfigZerosTakeDefaults: Validate takes zero settings for their
// defaults, as a program that embeds a node leaves them; ValidateAsGiven
// refuses the same zeros.
func TestConfigZerosTakeDefaults(t *testing.T) {
	cfg := testConfig(t, "n1", t.TempDir())
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate with zero settings: %v", err)
	}
	var fe *FieldError
	if err := cfg.ValidateAsGiven(); !errors.As(err, &fe) {
		t.Fatalf("ValidateAsGiven with zero settings: %v, want a FieldError", err)
	}
}

// TestFieldErrorExplain: Explain names fields the caller's way, and keeps
// the Go name of a field it does not name.
func TestFieldErrorExplain(t *testing.T) {
	e := &FieldError{Field: "Lease", Msg: "{Lease} 2s is not shorter than {Raft.HeartbeatTimeout} (1s), nor {Other}"}
	flags := map[string]string{"Lease": "--lease", "Raft.HeartbeatTimeout": "--heartbeat-timeout"}
	if got, want := e.Explain(func(f string) string { return flags[f] }), "--lease 2s is not shorter than --heartbeat-timeout (1s), nor Other"; got != want {
		t.Errorf("Explain: %q, want %q", got, want)
	}
	if got, want := e.Error(), "invalid configuration: Lease 2s is not shorter than Raft.HeartbeatTimeout (1s), nor Other"; got != want {
		t.Errorf("Error: %q, want %q", got, want)
	}
	if got := (&FieldError{Msg: "a { without end"}).Explain(nil); got != "a { without end" {
		t.Errorf("unbalanced brace: %q", got)
	}
}
