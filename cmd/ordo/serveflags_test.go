package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/secure/securetest"
	"github.com/seed-e8569b35/ordo/server"
)

// serveFlagCase is how to refuse and how to accept one of ordo serve's
// flags.
type serveFlagCase struct {
	// bad are values the flag refuses, each with a usage error that is
	// about the flag: it starts with the flag's name.
	bad []string
	// noBad says why a flag has no bad value, when bad is empty.
	noBad string
	// good is a value the flag accepts.
	good string
	// with are other flags the values need (name, value pairs).
	with []string
}

// serveFlagCases gives every flag of ordo serve a case; dir holds the
// files the cases name.
func serveFlagCases(t *testing.T, dir string) map[string]serveFlagCase {
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pki := securetest.New(t, "ca")
	node := pki.Node("n1")
	notPEM := write("not.pem", "no certificate here\n")
	missing := filepath.Join(dir, "missing")
	return map[string]serveFlagCase{
		"config":                         {bad: []string{missing}, good: write("ordo.conf", "log-level = warn\n")},
		"id":                             {bad: []string{"-x", "a b", strings.Repeat("n", 65)}, good: "n2"},
		"data-dir":                       {bad: []string{""}, good: dir},
		"raft-addr":                      {bad: []string{"foo", "127.0.0.1:x", "127.0.0.1:70000", "10.0.0.1:7101"}, good: "127.0.0.1:0"},
		"raft-advertise":                 {bad: []string{"foo", "0.0.0.0:7101", "n1.example:0"}, good: "n1.example:7101"},
		"grpc-addr":                      {bad: []string{"foo", ":x", "10.0.0.1:7001"}, good: "127.0.0.1:0"},
		"grpc-advertise":                 {bad: []string{"foo", ":7001"}, good: "n1.example:7001"},
		"http-addr":                      {bad: []string{"8080", "10.0.0.1:8080"}, good: "127.0.0.1:0"},
		"bootstrap":                      {bad: []string{"n1", "n1=foo@127.0.0.1:7001", "n1=127.0.0.1:7101@0.0.0.0:7001"}, good: "n1=127.0.0.1:7101@127.0.0.1:7001,n2=127.0.0.2:7101@127.0.0.2:7001"},
		"join":                           {bad: []string{"10.0.0.1", "127.0.0.1:7001,,127.0.0.2:7001"}, good: "127.0.0.1:7001, 127.0.0.2:7001"},
		"join-timeout":                   {bad: []string{"0", "-1s", "25h", "soon"}, good: "30s"},
		"force-bootstrap":                {bad: []string{"maybe"}, good: "true"},
		"recover":                        {bad: []string{"maybe"}, good: "true"},
		"dense-skip":                     {bad: []string{"-1", "many"}, good: "1000"},
		"recover-jump":                   {bad: []string{"-1s", "25h"}, good: "0"},
		"layout":                         {bad: []string{"bogus"}, good: "twitter"},
		"group":                          {bad: []string{"1099511627776", "-1"}, good: "3"},
		"reserve-window":                 {bad: []string{"0", "-1s", "61s", "soon"}, good: "1m"},
		"max-count":                      {bad: []string{"0", "40960002", "-1"}, good: "1"},
		"metrics-sequences":              {bad: []string{"0", "1001"}, good: "1000"},
		"reservation-ttl":                {bad: []string{"0", "2h"}, good: "1ms"},
		"max-reservation-ttl":            {bad: []string{"0", "25h"}, good: "24h"},
		"max-open-reservations":          {bad: []string{"0", "10000001"}, good: "1"},
		"max-conns-per-host":             {bad: []string{"0", "-2", "1000001"}, good: "-1"},
		"rpc-timeout":                    {bad: []string{"0", "1ms", "2h"}, good: "100ms"},
		"apply-timeout":                  {bad: []string{"0", "11m"}, good: "10m"},
		"heartbeat-timeout":              {bad: []string{"0", "-1s", "2m"}, good: "600ms"},
		"election-timeout":               {bad: []string{"0", "-1s", "999ms", "61s"}, good: "5s"},
		"leader-lease-timeout":           {bad: []string{"0", "2s"}, good: "100ms"},
		"lease":                          {bad: []string{"5ms", "1s", "-1s", "soon"}, good: "300ms"},
		"snapshot-threshold":             {bad: []string{"0", "100000001"}, good: "64"},
		"snapshot-interval":              {bad: []string{"0", "25h"}, good: "1s"},
		"trailing-logs":                  {bad: []string{"-1", "100000001"}, good: "0"},
		"cluster-id":                     {bad: []string{"xyz", strings.Repeat("A", 32)}, good: "0123456789abcdef0123456789abcdef"},
		"tls-cert":                       {bad: []string{"", missing, notPEM, node.Key}, good: node.Cert, with: []string{"tls-key", node.Key, "tls-ca", pki.CAFile()}},
		"tls-key":                        {bad: []string{"", missing, notPEM, pki.Client("c").Key}, good: node.Key, with: []string{"tls-cert", node.Cert, "tls-ca", pki.CAFile()}},
		"tls-ca":                         {bad: []string{"", missing, notPEM}, good: pki.CAFile(), with: []string{"tls-cert", node.Cert, "tls-key", node.Key}},
		"insecure":                       {bad: []string{"maybe"}, good: "true"},
		"admin-subject":                  {bad: []string{"ordo-admin"}, good: "CN=ordo-admin; CN=ops,O=Example"},
		"admin-token-file":               {bad: []string{missing, write("short.token", "short\n")}, good: write("admin.token", "0123456789abcdef0123\n")},
		"pprof-addr":                     {bad: []string{"6060", "10.0.0.1:6060"}, good: "127.0.0.1:0"},
		"log-level":                      {bad: []string{"bogus", "off"}, good: "warn"},
		"log-json":                       {bad: []string{"maybe"}, good: "true"},
		"test-unsafe-trust-reservation":  {bad: []string{"maybe"}, good: "true"},
		"test-unsafe-settle-early":       {bad: []string{"maybe"}, good: "true"},
		"test-clock-offset-file":         {noBad: "any path: a file missing, or not yet written, means no shift", good: filepath.Join(dir, "clock")},
		"test-crash-before-keyed-answer": {noBad: "any path: a file missing, or not holding 'arm', arms nothing", good: filepath.Join(dir, "crash")},
	}
}

// serveBase are the flags every case starts from: the required ones.
func serveBase(dir string) map[string]string {
	return map[string]string{"id": "n1", "data-dir": dir}
}

// checkServe parses and checks an ordo serve command line, as runServe
// does before it starts anything.
func checkServe(args []string) (server.Config, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	_, cfg, _, err := parseServe(fs, args)
	return cfg, err
}

// namesFlag reports whether err is a usage error about flag name: its
// message starts with --name.
func namesFlag(err error, name string) bool {
	if !errors.Is(err, errUsage) {
		return false
	}
	msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
	rest, ok := strings.CutPrefix(msg, "--"+name)
	return ok && (rest == "" || strings.ContainsAny(rest[:1], ` :"(`))
}

// TestServeFlagsNameThemselves: every flag ordo serve takes, enumerated
// from its FlagSet (a new flag without a case fails), refuses each of its
// bad values, given on the command line or in its ORDO_ variable, with a
// usage error about that flag; and takes a good value.
func TestServeFlagsNameThemselves(t *testing.T) {
	dir := t.TempDir()
	cases := serveFlagCases(t, dir)
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	newServeFlags(fs)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	for name := range cases {
		if !slices.Contains(names, name) {
			t.Errorf("a case for --%s, which ordo serve does not take", name)
		}
	}
	for _, name := range names {
		c, ok := cases[name]
		if !ok {
			t.Errorf("--%s has no case in serveFlagCases: give it a bad value and a good one", name)
			continue
		}
		if len(c.bad) == 0 && c.noBad == "" {
			t.Errorf("--%s has no bad value and no reason why", name)
		}
		t.Run(name, func(t *testing.T) {
			args := func(value string, inEnv bool) []string {
				var args []string
				for k, v := range serveBase(dir) {
					if k != name {
						args = append(args, "--"+k+"="+v)
					}
				}
				for i := 0; i+1 < len(c.with); i += 2 {
					args = append(args, "--"+c.with[i]+"="+c.with[i+1])
				}
				if !inEnv {
					args = append(args, "--"+name+"="+value)
				}
				return args
			}
			for _, inEnv := range []bool{false, true} {
				where := "--" + name
				if inEnv {
					where = "$" + envName(name)
				}
				for _, bad := range c.bad {
					if inEnv {
						t.Setenv(envName(name), bad)
					}
					if _, err := checkServe(args(bad, inEnv)); !namesFlag(err, name) {
						t.Errorf("%s=%q: %v, want a usage error that starts with --%s", where, bad, err, name)
					}
				}
				if inEnv {
					t.Setenv(envName(name), c.good)
				}
				if _, err := checkServe(args(c.good, inEnv)); err != nil {
					t.Errorf("%s=%q: %v, want it accepted", where, c.good, err)
				}
				if inEnv {
					os.Unsetenv(envName(name))
				}
			}
		})
	}
}

// TestServeMessagesNameTheProblem: the messages that named the wrong
// problem name the right one.
func TestServeMessagesNameTheProblem(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--id", "n1", "--data-dir", dir}
	for _, tt := range []struct {
		args   []string
		wantIn []string
		notIn  []string
	}{
		{nil, []string{"--id and --data-dir are missing", "--bootstrap or --join"}, []string{"bad request"}},
		{[]string{"--id", "x"}, []string{"--data-dir is missing"}, []string{"data dir is empty"}},
		{[]string{"--data-dir", dir}, []string{"--id is missing"}, []string{"bad request"}},
		{append(base, "--grpc-addr", "foo"), []string{`--grpc-addr "foo": the port is missing: want host:port`}, []string{"loopback"}},
		{append(base, "--heartbeat-timeout", "0"), []string{"--heartbeat-timeout 0s: want 10ms to 1m"}, []string{"lease"}},
		{append(base, "--election-timeout", "-1s"), []string{"--election-timeout -1s: want --heartbeat-timeout (1s) to 1m"}, []string{"raft:", "too low"}},
		{append(base, "--lease", "1s"), []string{"--lease 1s is not shorter than --heartbeat-timeout (1s)"}, []string{"unexpected arguments"}},
		{append(base, "--log-level", "bogus"), []string{`--log-level "bogus": want one of trace, debug, info, warn, error`}, nil},
		{append(base, "--max-count", "0"), []string{"--max-count 0: want 1 to "}, nil},
		{append(base, "--rpc-timeout", "0"), []string{"--rpc-timeout 0s: want 100ms to 1h"}, nil},
		{append(base, "--reserve-window", "0"), []string{"--reserve-window 0s: want 1ms (one time unit of the layout) to 1m"}, nil},
		{append(base, "--reserve-window", "5m"), []string{"--reserve-window 5m: want 1ms (one time unit of the layout) to 1m"}, nil},
		{append(base, "--reserve-window", "soon"), []string{`--reserve-window "soon": want a duration`}, []string{"parse error"}},
		{append(base, "--nope"), []string{"unknown flag --nope"}, nil},
		{append(base, "--id"), []string{"--id needs a value"}, nil},
	} {
		_, err := checkServe(tt.args)
		if !errors.Is(err, errUsage) {
			t.Errorf("ordo serve %q: %v, want a usage error", tt.args, err)
			continue
		}
		for _, s := range tt.wantIn {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("ordo serve %q: %q, want it to say %q", tt.args, err, s)
			}
		}
		for _, s := range tt.notIn {
			if strings.Contains(err.Error(), s) {
				t.Errorf("ordo serve %q: %q, which should not say %q", tt.args, err, s)
			}
		}
	}
	t.Setenv("ORDO_RESERVE_WINDOW", "2m")
	if _, err := checkServe(base); err == nil || !strings.Contains(err.Error(), "--reserve-window 2m: want") || !strings.Contains(err.Error(), "(from $ORDO_RESERVE_WINDOW)") {
		t.Errorf("ORDO_RESERVE_WINDOW=2m: %v, want the flag and the variable named", err)
	}
}

// TestServeLeaseTakesAValue: --lease stands alone (500ms), or takes its
// value after = or as the next argument, wherever it sits on the line.
func TestServeLeaseTakesAValue(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"--lease"}, server.DefaultLease},
		{[]string{"--lease", "--log-level", "warn"}, server.DefaultLease},
		{[]string{"--lease=300ms"}, 300 * time.Millisecond},
		{[]string{"--lease", "300ms"}, 300 * time.Millisecond},
		{[]string{"--lease", "300ms", "--log-level", "warn"}, 300 * time.Millisecond},
		{[]string{"-lease", "200ms"}, 200 * time.Millisecond},
		{[]string{"--lease", "false"}, 0},
		{[]string{"--lease", "0"}, 0},
		{nil, 0},
	} {
		args := append([]string{"--id", "n1", "--data-dir", dir}, tt.args...)
		cfg, err := checkServe(args)
		if err != nil || cfg.Lease != tt.want {
			t.Errorf("ordo serve %q: lease %s, %v; want %s", tt.args, cfg.Lease, err, tt.want)
		}
	}
	args := []string{"--id", "n1", "--data-dir", dir, "--lease", "300ms", "stray"}
	if _, err := checkServe(args); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), `unexpected arguments ["stray"]`) {
		t.Errorf("ordo serve %q: %v, want the stray argument refused", args, err)
	}
}

// TestServeHelpStatesBounds: the help of every numeric flag states its
// range (and so what 0 does); --reserve-window's names its upper bound.
func TestServeHelpStatesBounds(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	newServeFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok || f.Name == "dense-skip" { // any count; its help says what 0 means
			return
		}
		switch g.Get().(type) {
		case time.Duration, int, uint64:
			if !strings.Contains(f.Usage, " to ") {
				t.Errorf("--%s: help %q states no range", f.Name, f.Usage)
			}
		}
	})
	if u := fs.Lookup("reserve-window").Usage; !strings.Contains(u, "to 1m)") {
		t.Errorf("--reserve-window: help %q states no upper bound of 1m", u)
	}
}

// TestNextCountRange: ordo next refuses a --count beyond 32 bits by its
// range, not as too small, before it dials anyone.
func TestNextCountRange(t *testing.T) {
	for _, n := range []string{"0", "-1", "4294967296"} {
		err := runNext([]string{"--addrs", "127.0.0.1:1", "--count", n})
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--count "+n+": want 1 to 4294967295") {
			t.Errorf("ordo next --count %s: %v, want a usage error naming the range", n, err)
		}
	}
}
