package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsReadsEnvironment(t *testing.T) {
	newFlags := func() (*flag.FlagSet, *string, *time.Duration) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
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

// TestOnlyServeReadsEveryVariable: a command other than serve reads only
// the client variables (how to reach and call the cluster) from the
// environment, so a node's own settings (ORDO_ID, ORDO_LAYOUT) and a
// variable meant for another command's flag of the same name
// (ORDO_SEQUENCES, a number for bench, against status's switch) neither
// steer it nor break it; its help names only the variables it reads.
func TestOnlyServeReadsEveryVariable(t *testing.T) {
	t.Setenv("ORDO_ID", "n3")
	t.Setenv("ORDO_LAYOUT", "ulid")
	t.Setenv("ORDO_SEQUENCES", "5")
	t.Setenv("ORDO_ADDRS", "127.0.0.1:7009")
	t.Setenv("ORDO_TLS_CA", "/ca.pem")
	for _, command := range []string{"remove", "transfer-leader", "status", "decode", "join", "restore"} {
		fs := flag.NewFlagSet(command, flag.ContinueOnError)
		id, spec := fs.String("id", "", ""), fs.String("layout", "default", "")
		sequences := fs.Bool("sequences", false, "")
		addrs, ca := fs.String("addrs", "", ""), fs.String("tls-ca", "", "")
		if err := parseFlags(fs, nil); err != nil {
			t.Errorf("%s: %v", command, err)
			continue
		}
		if *id != "" || *spec != "default" || *sequences {
			t.Errorf("%s read a node's or another command's variable: --id %q --layout %q --sequences %v", command, *id, *spec, *sequences)
		}
		if *addrs != "127.0.0.1:7009" || *ca != "/ca.pem" {
			t.Errorf("%s did not read the client variables: --addrs %q --tls-ca %q", command, *addrs, *ca)
		}
		if u := fs.Lookup("id").Usage; strings.Contains(u, "ORDO_ID") {
			t.Errorf("%s --id's help names $ORDO_ID: %q", command, u)
		}
	}
	// bench's --addrs may be etcd's, and verify's switches it away from
	// its own cluster: ORDO_ADDRS does neither.
	for _, command := range []string{"bench", "verify"} {
		fs := flag.NewFlagSet(command, flag.ContinueOnError)
		addrs := fs.String("addrs", "", "")
		if err := parseFlags(fs, nil); err != nil || *addrs != "" {
			t.Errorf("%s: --addrs %q, %v; want it left empty", command, *addrs, err)
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	id := fs.String("id", "", "")
	if err := parseFlags(fs, nil); err != nil || *id != "n3" {
		t.Errorf("serve: --id %q, %v; want n3 from $ORDO_ID", *id, err)
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

// TestConfigFile: the command line wins over the environment, which wins
// over the file; a bad file is a usage error naming its line.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	files := 0
	write := func(text string) string {
		files++
		p := filepath.Join(dir, fmt.Sprintf("c%d.conf", files))
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newFlags := func() (*flag.FlagSet, map[string]*string) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.String("config", "", "")
		v := map[string]*string{}
		for _, name := range []string{"id", "data-dir", "grpc-addr", "raft-addr"} {
			v[name] = fs.String(name, "default-"+name, "")
		}
		return fs, v
	}
	good := write("# a node\n\nid = from-file\ndata-dir=/file/dir\n  grpc-addr =  127.0.0.1:9 \nraft-addr = 127.0.0.1:8\n")
	t.Setenv("ORDO_DATA_DIR", "/env/dir")
	fs, v := newFlags()
	if err := parseFlags(fs, []string{"--config", good, "--raft-addr", "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"id": "from-file", "data-dir": "/env/dir", "grpc-addr": "127.0.0.1:9", "raft-addr": "127.0.0.1:1"} {
		if *v[name] != want {
			t.Errorf("%s = %q, want %q", name, *v[name], want)
		}
	}
	for text, wantIn := range map[string]string{
		"id = a\nnope = b\n":    ":2: unknown setting",
		"id = a\nid = b\n":      ":2: \"id\" already set on line 1",
		"just words\n":          ":1: want name = value",
		"config = other.conf\n": ":1: unknown setting",
		"= value\n":             ":1: want name = value",
	} {
		fs, _ := newFlags()
		err := parseFlags(fs, []string{"--config", write(text)})
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), wantIn) {
			t.Errorf("config %q: %v, want a usage error containing %q", text, err, wantIn)
		}
	}
	fs, _ = newFlags()
	if err := parseFlags(fs, []string{"--config", filepath.Join(dir, "missing")}); !errors.Is(err, errUsage) {
		t.Errorf("a missing config file: %v, want a usage error", err)
	}
}

func TestOnCommandLine(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want bool
	}{
		{[]string{"--recover"}, true},
		{[]string{"-recover=true"}, true},
		{[]string{"--id", "n1", "--recover", "--data-dir", "d"}, true},
		{[]string{"--id", "recover"}, false},
		{[]string{"--recover-jump", "1m"}, false},
		{[]string{"--", "--recover"}, false},
		{nil, false},
	} {
		if got := onCommandLine(tt.args, "recover"); got != tt.want {
			t.Errorf("onCommandLine(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}

// TestRecoverOnlyFromTheCommandLine: --recover in the environment or a
// config file is refused before anything is touched.
func TestRecoverOnlyFromTheCommandLine(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "ordo.conf")
	if err := os.WriteFile(conf, []byte("recover = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--id", "n1", "--data-dir", filepath.Join(dir, "data")}
	if err := runServe(append(base, "--config", conf)); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "command line") {
		t.Errorf("recover from a config file: %v, want a usage error", err)
	}
	t.Setenv("ORDO_RECOVER", "true")
	if err := runServe(base); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "command line") {
		t.Errorf("recover from the environment: %v, want a usage error", err)
	}
}

func TestFlagSet(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Duration("duration", time.Second, "")
	fs.Int("rounds", 0, "")
	fs.String("from-env", "", "")
	t.Setenv("ORDO_FROM_ENV", "x")
	if err := parseFlags(fs, []string{"--rounds", "1"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"rounds": true, "from-env": true, "duration": false} {
		if got := flagSet(fs, name); got != want {
			t.Errorf("flagSet(%q) = %v, want %v", name, got, want)
		}
	}
}
