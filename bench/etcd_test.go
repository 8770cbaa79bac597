package bench

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/seed-e8569b35/ordo/internal/freeaddr"
)

// header builds a ResponseHeader as etcd sends it.
func header(clusterID, memberID uint64, revision int64, term uint64) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, clusterID)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, memberID)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(revision))
	b = protowire.AppendTag(b, 4, protowire.VarintType)
	b = protowire.AppendVarint(b, term)
	return b
}

// putResponse wraps a header (and optional extra fields) as a PutResponse.
func putResponse(hdr []byte, extra ...byte) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, hdr)
	return append(b, extra...)
}

func TestEncodePutRequest(t *testing.T) {
	b := encodePutRequest([]byte("ordo-bench/7"), []byte("x"))
	got := map[protowire.Number]string{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			t.Fatalf("bad tag: n=%d type=%d", n, typ)
		}
		b = b[n:]
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			t.Fatalf("field %d: %v", num, protowire.ParseError(m))
		}
		got[num] = string(v)
		b = b[m:]
	}
	if len(got) != 2 || got[1] != "ordo-bench/7" || got[2] != "x" {
		t.Fatalf("decoded PutRequest fields %q, want key (1) and value (2)", got)
	}
}

func TestDecodePutRevision(t *testing.T) {
	// prev_kv (field 2, a KeyValue message) and a field unknown to this
	// code must be skipped, wherever they are.
	var prevKV []byte
	prevKV = protowire.AppendTag(prevKV, 2, protowire.BytesType)
	prevKV = protowire.AppendBytes(prevKV, []byte{0x0a, 0x01, 'k'})
	var unknown []byte
	unknown = protowire.AppendTag(unknown, 99, protowire.Fixed64Type)
	unknown = protowire.AppendFixed64(unknown, 5)
	hdr := append(header(0xcafe, 0xbeef, 1<<40, 3), unknown...)
	for name, b := range map[string][]byte{
		"plain":         putResponse(header(1, 2, 42, 3)),
		"extra fields":  append(append(append([]byte{}, unknown...), putResponse(hdr)...), prevKV...),
		"large":         putResponse(header(1, 2, 1<<40, 3)),
		"header merged": append(putResponse(header(1, 2, 7, 3)), putResponse(header(1, 2, 42, 3))...),
	} {
		want := int64(42)
		if name == "large" || name == "extra fields" {
			want = 1 << 40
		}
		if rev, err := decodePutRevision(b); err != nil || rev != want {
			t.Errorf("%s: revision %d, %v; want %d", name, rev, err, want)
		}
	}
}

func TestDecodePutRevisionRejectsMalformed(t *testing.T) {
	good := putResponse(header(1, 2, 42, 3))
	wrongType := protowire.AppendTag(nil, 1, protowire.VarintType)
	wrongType = protowire.AppendVarint(wrongType, 42)
	var revAsBytes []byte
	revAsBytes = protowire.AppendTag(revAsBytes, 3, protowire.BytesType)
	revAsBytes = protowire.AppendBytes(revAsBytes, []byte{42})
	for name, b := range map[string][]byte{
		"empty":               nil,
		"no revision":         putResponse(nil),
		"zero revision":       putResponse(header(1, 2, 0, 3)),
		"negative revision":   putResponse(header(1, 2, -5, 3)),
		"truncated":           good[:len(good)-1],
		"truncated varint":    putResponse([]byte{0x18, 0x80}),
		"length past the end": {0x0a, 0x7f, 0x18, 0x2a},
		"header not bytes":    wrongType,
		"revision not varint": putResponse(revAsBytes),
		"invalid tag":         {0x00},
		"garbage":             []byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"),
	} {
		rev, err := decodePutRevision(b)
		if !errors.Is(err, ErrBadResponse) {
			t.Errorf("%s: revision %d, error %v; want ErrBadResponse", name, rev, err)
		}
	}
}

// FuzzDecodePutRevision checks that no input panics, and that whatever is
// accepted is a positive revision. Its seeds run with every `go test`.
func FuzzDecodePutRevision(f *testing.F) {
	f.Add(putResponse(header(1, 2, 42, 3)))
	f.Add([]byte{0x0a, 0x7f})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		rev, err := decodePutRevision(b)
		if err == nil && rev <= 0 {
			t.Fatalf("accepted revision %d", rev)
		}
		if err != nil && !errors.Is(err, ErrBadResponse) {
			t.Fatalf("error %v is not ErrBadResponse", err)
		}
	})
}

func TestRawCodec(t *testing.T) {
	var c rawCodec
	in := []byte{1, 2, 3}
	out, err := c.Marshal(&rawFrame{b: in})
	if err != nil || !bytes.Equal(out, in) {
		t.Fatalf("Marshal = %v, %v", out, err)
	}
	var f rawFrame
	if err := c.Unmarshal(in, &f); err != nil || !bytes.Equal(f.b, in) {
		t.Fatalf("Unmarshal = %v, %v", f.b, err)
	}
	in[0] = 9 // grpc may reuse its buffer: the frame must own a copy
	if f.b[0] != 1 {
		t.Fatal("Unmarshal kept a reference to grpc's buffer")
	}
	if _, err := c.Marshal("not a frame"); err == nil {
		t.Error("Marshal accepted a string")
	}
	if err := c.Unmarshal(in, new(string)); err == nil {
		t.Error("Unmarshal accepted a *string")
	}
}

func TestEtcdBadConfig(t *testing.T) {
	base := Config{Target: TargetEtcd, Addrs: []string{"127.0.0.1:1"}, Concurrency: 1, Count: 1, Duration: time.Second}
	for name, mod := range map[string]func(*Config){
		"count 2":        func(c *Config) { c.Count = 2 },
		"unary":          func(c *Config) { c.Unary = true },
		"coalesce":       func(c *Config) { c.Coalesce = 4 },
		"unknown target": func(c *Config) { c.Target = "zookeeper" },
	} {
		cfg := base
		mod(&cfg)
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: Run = %v, want ErrBadConfig", name, err)
		}
	}
}

// startEtcd runs a single-member etcd in a temporary directory and returns
// its client address; the process is killed when the test ends.
func startEtcd(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd is not installed (apt-get install etcd-server); skipping the live etcd test")
	}
	dir := t.TempDir()
	// etcd cannot be told to listen on port 0 and report the port; a lost
	// race for a port shows up as etcd exiting, which the test reports.
	addrs := freeaddr.Loopback(t, 2)
	clientURL, peerURL := "http://"+addrs[0], "http://"+addrs[1]
	logPath := filepath.Join(dir, "etcd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(bin,
		"--name", "bench-test", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "bench-test="+peerURL, "--initial-cluster-state", "new")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("etcd (pid %d) did not exit within 10 s of being killed", cmd.Process.Pid)
		}
		if t.Failed() {
			if log, err := os.ReadFile(logPath); err == nil {
				t.Logf("etcd log:\n%s", log)
			}
		}
	})
	addr := clientURL[len("http://"):]
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("etcd exited during startup (port taken?): %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not listen on %s within 20 s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRunAgainstEtcd(t *testing.T) {
	addr := startEtcd(t)
	// Bounded: Run's own first request gives up after 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{
		Target: TargetEtcd, Addrs: []string{addr}, Concurrency: 8, Count: 1, Duration: 1500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd: %s", res)
	if res.Requests == 0 || res.IDs != res.Requests || res.Target != TargetEtcd {
		t.Fatalf("requests %d, IDs %d, target %q", res.Requests, res.IDs, res.Target)
	}
	if !res.OK() {
		t.Fatalf("etcd's revisions failed the order check: %s", res.Check)
	}
}
