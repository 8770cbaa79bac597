//go:build unix

package cluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/secure/securetest"
	"github.com/seed-e8569b35/ordo/verify"
)

// tlsRefusals are what a node logs when it refuses a peer's certificate
// or denies a call for who made it.
var tlsRefusals = []string{"refused a TLS peer", "grpc: denied"}

// mustNoRefusals fails the test if any log in logs shows a refusal.
func mustNoRefusals(t *testing.T, logs ...string) {
	t.Helper()
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("read %s: %v", path, err)
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, r := range tlsRefusals {
				if strings.Contains(line, r) {
					t.Errorf("%s: %s", filepath.Base(path), line)
				}
			}
		}
	}
}

// TestVerifyTLS runs the chaos workload against a cluster with mutual TLS
// on every port: nodes serve gen-certs.sh's node certificate, the
// workload's failover, stream and pinned clients present the client
// certificate, and the nemesis the admin certificate for finding the
// leader, transferring leadership and removing and re-adding a node (who
// joins again with its node certificate, and must still run at the end:
// Result.Exited). Raft runs over mutual TLS through the fault proxies
// (isolate-leader) and every node starts again at once (restart-all).
func TestVerifyTLS(t *testing.T) {
	set := securetest.WriteSet(t, filepath.Join(t.TempDir(), "certs"))
	cfg := verify.Config{
		Binary: ordoBin, Dir: t.TempDir(), Nodes: 3,
		Duration: 2 * time.Minute, Rounds: 1, // ends after each fault ran once
		Clients: 8, Streams: 4, Pinned: true, MaxCount: 8,
		Faults:   []string{"kill-leader", "pause-leader", "transfer-leader", "isolate-leader", "remove-readd", "restart-all"},
		Interval: 2500 * time.Millisecond, Hold: 1200 * time.Millisecond, Seed: 7,
		ServeArgs: append([]string{"--log-level", "warn"}, fastTimers...),
		TLS:       verify.TLSDir(set.Dir),
		Progress:  testWriter{t},
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+time.Minute)
	defer cancel()
	var res verify.Result
	defer explainVerifyFailure(t, &res, cfg.Dir)
	res, err := verify.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if !res.OK() || res.Report.Duplicates != 0 || res.Report.OrderViolations != 0 {
		t.Fatal("verification with TLS failed; see the report above")
	}
	if len(res.Faults) != len(cfg.Faults) {
		t.Fatalf("%d of %d faults ran; see the report above", len(res.Faults), len(cfg.Faults))
	}
	if res.Report.Acknowledged < 500 {
		t.Errorf("only %d requests acknowledged: the workload barely ran", res.Report.Acknowledged)
	}
	// Every admin call and every connection was accepted: a denial of
	// transfer-leader or a refused handshake would otherwise only cost
	// throughput.
	var logs []string
	for i := range cfg.Nodes {
		logs = append(logs, filepath.Join(cfg.Dir, fmt.Sprintf("n%d.log", i+1)))
	}
	mustNoRefusals(t, logs...)
}

// TestVerifyTLSDir runs `ordo verify --addrs --tls-dir` against a TLS
// cluster: the client side uses ca.pem and client.pem of the directory.
func TestVerifyTLSDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	securetest.WriteSet(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodeDir := t.TempDir()
	defer explainVerifyFailure(t, nil, nodeDir)
	vc, err := verify.StartCluster(ctx, verify.ClusterConfig{
		Binary: ordoBin, Dir: nodeDir, Nodes: 3, TLS: verify.TLSDir(dir),
		ServeArgs: append([]string{"--log-level", "warn"}, fastTimers...),
		Logf:      t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vc.Stop)
	addrs := strings.Join(vc.Addrs(), ",")

	// The nodes speak TLS only: a plaintext client gets nothing.
	plain, err := client.New(vc.Addrs(), client.WithAttemptTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = plain.Next(pctx)
	pcancel()
	if err == nil {
		t.Fatal("a plaintext client got an ID from a TLS cluster")
	}

	res := runOrdoFor(t, time.Minute, "verify", "--addrs", addrs, "--tls-dir", dir, "--duration", "2s", "--clients", "4", "--streams", "2")
	if res.Code != 0 || !strings.Contains(res.Stdout, "verdict: PASS") || !strings.Contains(res.Stderr, "mutual TLS") {
		t.Fatalf("ordo verify --addrs --tls-dir: exit %d\nstdout: %s\nstderr: %s", res.Code, res.Stdout, lastLines(res.Stderr, 20))
	}
	t.Log(lastLines(res.Stdout, 4))

	// A directory without the client's files is a usage error, found
	// before any client runs.
	empty := t.TempDir()
	res = runOrdoFor(t, time.Minute, "verify", "--addrs", addrs, "--tls-dir", empty, "--duration", "2s")
	if res.Code != 2 || !strings.Contains(res.Stderr, "client") {
		t.Fatalf("ordo verify --tls-dir with no files: exit %d, want 2 naming the client files\nstderr: %s", res.Code, res.Stderr)
	}
	var logs []string
	for _, n := range vc.Nodes {
		logs = append(logs, n.LogFile)
	}
	mustNoRefusals(t, logs...)
}

// steadyLoad is clients that share one client.Client (which can be
// swapped for another) and record every call; every call must succeed.
type steadyLoad struct {
	t      *testing.T
	rec    *history.Recorder
	cur    atomic.Pointer[client.Client]
	cancel context.CancelFunc
	done   chan struct{}

	tally history.Tally
	mu    sync.Mutex
	errs  []string // the first maxFailures failures, with their times
}

// maxFailures is how many failures a steadyLoad keeps for the report.
const maxFailures = 20

// callTimeout is each call's deadline: long enough for the client to
// fail over across an election.
const callTimeout = 10 * time.Second

func startSteadyLoad(t *testing.T, c *client.Client, workers int) *steadyLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &steadyLoad{t: t, rec: history.NewRecorder(), cancel: cancel, done: make(chan struct{})}
	l.cur.Store(c)
	var wg sync.WaitGroup
	for id := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			caller := history.Caller{Rec: l.rec, Tally: &l.tally, Client: id}
			for ctx.Err() == nil {
				n := 1 + rand.IntN(maxBatch)
				start := time.Now()
				_, err := caller.Call(func() ([]uint64, []string, error) {
					// Not derived from ctx: stopping the load must not
					// cancel a call in flight.
					cctx, ccancel := context.WithTimeout(context.Background(), callTimeout)
					defer ccancel()
					ids, err := l.cur.Load().NextN(cctx, n)
					return ids, nil, err
				})
				if err != nil {
					l.mu.Lock()
					if len(l.errs) < maxFailures {
						l.errs = append(l.errs, fmt.Sprintf("%s (after %v): %v", start.Format("15:04:05.000"), time.Since(start).Round(time.Millisecond), err))
					}
					l.mu.Unlock()
					time.Sleep(10 * time.Millisecond) // a call that fails at once must not spin
					continue
				}
				time.Sleep(time.Millisecond) // leave the 2-core test host some CPU for the nodes
			}
		}()
	}
	go func() { wg.Wait(); close(l.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-l.done:
		case <-time.After(callTimeout + 5*time.Second):
		}
	})
	return l
}

// mustProgress waits until n more calls succeed, up to d.
func (l *steadyLoad) mustProgress(n int64, d time.Duration, what string) {
	l.t.Helper()
	start := l.acked()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if l.acked() >= start+n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.t.Fatalf("%s: %d of %d calls succeeded within %v; failures so far: %q", what, l.acked()-start, n, d, l.failures())
}

// acked is how many calls have succeeded so far.
func (l *steadyLoad) acked() int64 { return l.tally.Counts().OK }

func (l *steadyLoad) failures() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errs...)
}

// stop ends the load and returns the history.
func (l *steadyLoad) stop() []history.Op {
	l.t.Helper()
	l.cancel()
	select {
	case <-l.done:
	case <-time.After(callTimeout + 5*time.Second):
		l.t.Fatalf("load did not stop within %v", callTimeout+5*time.Second)
	}
	return l.rec.Ops()
}

// mustStop sends SIGTERM to n and waits for a clean exit.
func (c *cluster) mustStop(n *node) {
	c.t.Helper()
	c.signal(n, syscall.SIGTERM)
	code, ok := n.WaitExit(exitTimeout)
	if !ok {
		c.t.Fatalf("%s did not exit within %v of SIGTERM", n.Name, exitTimeout)
	}
	if code != 0 {
		c.t.Errorf("%s exited with code %d after SIGTERM:\n%s", n.Name, code, lastLines(c.output(n), 20))
	}
}

// mustRejoin waits until the status shows n back as a voter that the
// leader reaches and that has applied what was committed when it came
// back.
func (c *cluster) mustRejoin(n *node) {
	c.t.Helper()
	info := func(r *api.StatusResponse, id string) *api.NodeInfo {
		for _, ni := range r.Nodes {
			if ni.Id == id {
				return ni
			}
		}
		return nil
	}
	resp := c.waitStatus(leaderTimeout, n.Name+" back in the cluster", func(r *api.StatusResponse) bool {
		ni := info(r, n.Name)
		return r.LeaderId != "" && ni != nil && ni.Error == "" && ni.Voter && (ni.Role == "follower" || ni.Role == "leader")
	})
	commit := info(resp, resp.LeaderId).GetCommitIndex()
	c.waitStatus(leaderTimeout, fmt.Sprintf("%s applied index %d", n.Name, commit), func(r *api.StatusResponse) bool {
		ni := info(r, n.Name)
		return ni != nil && ni.Error == "" && ni.AppliedIndex >= commit
	})
}

// servedCert returns the certificate the node at addr presents to a TLS
// client configured with cfg.
func servedCert(addr string, cfg *tls.Config) (*x509.Certificate, error) {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
}

// TestTLSRotationUnderLoad rotates every certificate of a three-node TLS
// cluster while clients ask for IDs throughout, and requires that no call
// fails: first new node certificates from the same CA, replaced on disk,
// with a rolling restart; then a new CA, in two rolling restarts (trust
// both CAs, then serve certificates of the new one), with the client
// moved to a new-CA certificate in between.
func TestTLSRotationUnderLoad(t *testing.T) {
	begin := time.Now()
	base := t.TempDir()
	ca1 := securetest.New(t, "ordo-ca")
	set := ca1.WriteSet(filepath.Join(base, "ca1"))
	// Each node has its own copy of the node certificate, so that one
	// node's files can be replaced while the others run.
	nodeFiles := map[string]secure.Files{}
	for _, id := range []string{"n1", "n2", "n3"} {
		dir := filepath.Join(base, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		nodeFiles[id] = securetest.Install(t, set.Node, filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem"))
	}
	c := mustNewCluster(t, clusterOpts{tls: &set, nodeTLS: nodeFiles})
	var logs []string
	for _, n := range c.Nodes {
		logs = append(logs, n.LogFile)
	}

	var clients []*client.Client
	newClient := func(files secure.Files) *client.Client {
		cl := tlsClient(t, c.addrs(), files, client.WithAttemptTimeout(time.Second))
		clients = append(clients, cl)
		return cl
	}
	t.Cleanup(func() {
		for _, cl := range clients {
			cl.Close()
		}
	})
	load := startSteadyLoad(t, newClient(set.Client), 6)
	load.mustProgress(200, 15*time.Second, "load before any restart")

	// roll restarts every node in turn with what change gives it, and
	// checks the certificate it serves then.
	roll := func(phase string, change func(n *node) (want *x509.Certificate), trust *tls.Config) {
		t.Helper()
		for _, n := range c.Nodes {
			want := change(n)
			leader := c.mustLeader()
			t.Logf("%s: %s: restarting %s (leader %s), acknowledged so far %d", time.Now().Format("15:04:05.000"), phase, n.Name, leader.Name, load.acked())
			c.mustStop(n)
			c.mustRestart(n)
			c.mustRejoin(n)
			got, err := servedCert(n.GRPCAddr, trust)
			if err != nil {
				t.Fatalf("%s: %s after restart: %v", phase, n.Name, err)
			}
			if !got.Equal(want) {
				t.Fatalf("%s: %s serves %s serial %s, want serial %s", phase, n.Name, got.Subject, got.SerialNumber, want.SerialNumber)
			}
			load.mustProgress(100, 15*time.Second, phase+": load after restarting "+n.Name)
		}
	}
	adminTrust := securetest.MustLoad(t, set.Admin).ClientConfig()

	// 1. New node certificates from the same CA, written over the old
	// files.
	roll("same CA", func(n *node) *x509.Certificate {
		f := securetest.Install(t, ca1.Node("ordo-node", securetest.NodeHosts()...), nodeFiles[n.Name].Cert, nodeFiles[n.Name].Key)
		return securetest.MustLoad(t, f).Leaf()
	}, adminTrust)

	// 2a. A new CA: every node trusts both (a bundle) and still serves
	// its certificate of the old one.
	ca2 := securetest.New(t, "ordo-ca-2")
	bundle := securetest.Bundle(t, filepath.Join(base, "bundle.pem"), ca1.CAFile(), ca2.CAFile())
	roll("trust both CAs", func(n *node) *x509.Certificate {
		f := nodeFiles[n.Name]
		f.CA = bundle
		nodeFiles[n.Name] = f
		setTLS(n, f)
		return securetest.MustLoad(t, f).Leaf()
	}, adminTrust)

	// Clients move to certificates of the new CA and trust both, before
	// any node serves one of the new CA (a client trusting only the old
	// CA would refuse it).
	withBundle := func(f secure.Files) secure.Files { f.CA = bundle; return f }
	newAdmin := withBundle(ca2.Client(securetest.AdminCN))
	oldAdmin := c.admin
	c.admin = tlsClient(t, c.addrs(), newAdmin, client.WithAttemptTimeout(3*time.Second))
	oldAdmin.Close()
	adminTrust = securetest.MustLoad(t, newAdmin).ClientConfig()
	load.cur.Store(newClient(withBundle(ca2.Client(securetest.ClientCN))))
	t.Logf("%s: the client presents a certificate of the new CA", time.Now().Format("15:04:05.000"))
	load.mustProgress(100, 15*time.Second, "load with the new client certificate")

	// 2b. Every node serves a certificate of the new CA, written over
	// its files; the bundle stays.
	roll("new CA", func(n *node) *x509.Certificate {
		f := securetest.Install(t, ca2.Node("ordo-node", securetest.NodeHosts()...), nodeFiles[n.Name].Cert, nodeFiles[n.Name].Key)
		return securetest.MustLoad(t, secure.Files{Cert: f.Cert, Key: f.Key, CA: bundle}).Leaf()
	}, adminTrust)
	load.mustProgress(100, 15*time.Second, "load after the rotation")
	ops := load.stop()
	mustNoRefusals(t, logs...)

	// The cluster now serves only the new CA's certificates: a client
	// that trusts only it is served, one that trusts only the old is not.
	newOnly := tlsClient(t, c.addrs(), secure.Files{Cert: newAdmin.Cert, Key: newAdmin.Key, CA: ca2.CAFile()})
	defer newOnly.Close()
	oldOnly := tlsClient(t, c.addrs(), set.Client)
	defer oldOnly.Close()
	for _, check := range []struct {
		what  string
		cl    *client.Client
		works bool
	}{{"trusting only the new CA", newOnly, true}, {"trusting only the old CA", oldOnly, false}} {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		_, err := check.cl.Next(ctx)
		cancel()
		if (err == nil) != check.works {
			t.Errorf("a client %s: error %v, want success %v", check.what, err, check.works)
		}
	}

	if n := load.tally.Counts().Errors(); n > 0 {
		t.Errorf("%d of %d calls failed during the rotation (each had %v and fails over by itself); the first:\n%s",
			n, n+load.acked(), callTimeout, strings.Join(load.failures(), "\n"))
	}
	mustCheck(t, ops)
	t.Logf("rotation under load: %d calls acknowledged, %d failed, in %v", load.acked(), load.tally.Counts().Errors(), time.Since(begin).Round(time.Millisecond))
}
