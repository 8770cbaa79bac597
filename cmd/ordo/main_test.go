package main

import (
	"errors"
	"flag"
	"testing"
	"time"
)

func TestParseFlagsReadsEnvironment(t *testing.T) {
	newFlags := func() (*flag.FlagSet, *string, *time.Duration) {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		return fs, fs.String("data-dir", "", ""), fs.Duration("reserve-window", time.Second, "")
	}
	t.Setenv("ORDO_DATA_DIR", "/from/env")
	t.Setenv("ORDO_RESERVE_WINDOW", "7s")

	fs, dir, window := newFlags()
	if err := parseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	if *dir != "/from/env" || *window != 7*time.Second {
		t.Fatalf("from the environment: data-dir %q window %s", *dir, *window)
	}

	fs, dir, _ = newFlags()
	if err := parseFlags(fs, []string{"--data-dir", "/from/flag"}); err != nil {
		t.Fatal(err)
	}
	if *dir != "/from/flag" {
		t.Fatalf("the command line must win: data-dir %q", *dir)
	}

	t.Setenv("ORDO_RESERVE_WINDOW", "soon")
	fs, _, _ = newFlags()
	if err := parseFlags(fs, nil); !errors.Is(err, errUsage) {
		t.Fatalf("a bad environment value: %v, want a usage error", err)
	}
}

func TestParsePeers(t *testing.T) {
	peers, err := parsePeers("n1=127.0.0.1:7101@127.0.0.1:7001, n2=h:2@h:3")
	if err != nil {
		t.Fatal(err)
	}
	if len(peers) != 2 || peers[0].ID != "n1" || peers[0].RaftAddr != "127.0.0.1:7101" || peers[0].GRPCAddr != "127.0.0.1:7001" || peers[1].ID != "n2" {
		t.Fatalf("parsed %+v", peers)
	}
	for _, bad := range []string{"", "n1", "n1=a", "n1=a@", "=a@b", "n1=@b", "n1=a@b,n1=c@d"} {
		if _, err := parsePeers(bad); err == nil {
			t.Errorf("parsePeers(%q) accepted", bad)
		}
	}
}

func TestTLSHint(t *testing.T) {
	for msg, want := range map[string]bool{
		`rpc error: code = Unavailable desc = connection error: desc = "error reading server preface: EOF"`:                                                       true,
		`connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`: true,
		`rpc error: code = PermissionDenied desc = permission denied`:                                                                                             false,
		`rpc error: code = Unavailable desc = not the leader`:                                                                                                     false,
	} {
		if got := tlsHint(errors.New(msg)) != ""; got != want {
			t.Errorf("tlsHint(%q) given: %v, want %v", msg, got, want)
		}
	}
}
