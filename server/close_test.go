package server

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
)

// TestStreamLayerCloseEndsItsConnections: reads blocked on a dialed and on
// an accepted Raft connection return once the layer is closed, as Raft's
// replication must when the node shuts down and a peer stopped answering.
func TestStreamLayerCloseEndsItsConnections(t *testing.T) {
	l, err := newStreamLayer("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	// The dial waits for the accepted side's handshake, which runs on
	// that side's first read.
	type dial struct {
		c   net.Conn
		err error
	}
	dialed := make(chan dial, 1)
	go func() {
		c, err := l.Dial(raft.ServerAddress(l.Addr().String()), 5*time.Second)
		dialed <- dial{c, err}
	}()
	var in net.Conn
	select {
	case in = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the layer accepted no connection")
	}
	ended := make(chan string, 2)
	var wg sync.WaitGroup
	read := func(name string, c net.Conn) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.Read(make([]byte, 1)) // nothing is ever written
			ended <- name
		}()
	}
	read("accepted", in)
	var out net.Conn
	select {
	case d := <-dialed:
		if d.err != nil {
			in.Close()
			t.Fatal(d.err)
		}
		out = d.c
	case <-time.After(10 * time.Second):
		in.Close()
		t.Fatal("the dial did not return")
	}
	read("dialed", out)
	l.Close()
	deadline := time.After(10 * time.Second)
	for range 2 {
		select {
		case <-ended:
		case <-deadline:
			out.Close()
			in.Close()
			t.Fatal("a read on a Raft connection still blocks after the layer closed")
		}
	}
	wg.Wait()
	if _, err := l.Dial(raft.ServerAddress(l.Addr().String()), time.Second); err == nil {
		t.Fatal("the closed layer dialed a new connection")
	}
}

// TestCloseWithAStalledPeer: a leader whose peer accepts Raft connections
// and never reads from them still closes, within the bound Close promises
// (its two timeouts; the test allows twice that, as a deadline, not a
// speed measure).
func TestCloseWithAStalledPeer(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	stalled := followerOf(nodes, leader)
	addr := stalled.RaftAddr()
	if err := stalled.Close(); err != nil {
		t.Fatal(err)
	}
	hole, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen where the stalled peer was: %v", err)
	}
	var held []net.Conn
	var mu sync.Mutex
	defer func() {
		hole.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	go func() {
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // held open, never read
			mu.Unlock()
		}
	}()
	conn := grpctest.Dial(t, leader.GRPCAddr())
	eventually.True(t, seqTestWait, "the leader to dial the stalled peer", func() bool {
		mustNextVia(t, conn, 1000)
		mu.Lock()
		defer mu.Unlock()
		return len(held) > 0
	})
	for range 20 {
		mustNextVia(t, conn, 1000) // more entries queue behind the stall
	}
	closed := make(chan error, 1)
	go func() { closed <- leader.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Logf("Close: %v", err)
		}
	case <-time.After(2 * (closeTransferTimeout + closeRaftTimeout)):
		t.Fatal("Close still runs with a stalled peer")
	}
}
