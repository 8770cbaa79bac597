package faultproxy

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Net owns one Proxy per node and applies faults in terms of node names,
// which is how a nemesis thinks about the cluster.
//
// The link i→j (connections node i opens towards node j) is controlled by
// j's proxy filtering on i's IP, so cutting i and j both ways means blocking
// i's IP on j's proxy and j's IP on i's proxy.
//
// Fault operations are additive: Isolate, Partition, Bridge, OneWay and
// Stall add to whatever faults are already in place, and only Heal removes
// them. A nemesis that wants a fresh topology calls Heal first. Nodes not
// mentioned by an operation are left alone. Naming a node that was never
// added panics, since it can only be a bug in the caller and silently
// leaving the network healthy would invalidate the test.
type Net struct {
	mu    sync.Mutex
	names []string // in Add order, for deterministic iteration and logs
	nodes map[string]netNode
}

type netNode struct {
	ip    string
	proxy *Proxy
}

// NewNet returns an empty Net.
func NewNet() *Net {
	return &Net{nodes: make(map[string]netNode)}
}

// Add registers node name, whose Raft transport dials from nodeIP and whose
// inbound Raft traffic passes through p. Adding an existing name replaces it.
func (n *Net) Add(name, nodeIP string, p *Proxy) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.nodes[name]; !ok {
		n.names = append(n.names, name)
	}
	n.nodes[name] = netNode{ip: normIP(nodeIP), proxy: p}
}

// Names returns the registered node names in the order they were added.
func (n *Net) Names() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.names)
}

// Proxy returns the proxy in front of node name, or nil if there is none.
func (n *Net) Proxy(name string) *Proxy {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nodes[name].proxy
}

// Isolate cuts name from every other node in both directions.
func (n *Net) Isolate(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mustLocked(name)
	for _, o := range n.names {
		if o != name {
			n.cutLocked(name, o)
		}
	}
}

// Partition splits the named nodes into groups: nodes in different groups
// cannot talk in either direction, nodes in the same group are unaffected.
func (n *Net) Partition(groups ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for gi, g := range groups {
		for _, a := range g {
			n.mustLocked(a)
			for _, h := range groups[gi+1:] {
				for _, b := range h {
					n.mustLocked(b)
					if a != b {
						n.cutLocked(a, b)
					}
				}
			}
		}
	}
}

// Bridge cuts every node of a from every node of b in both directions while
// leaving the bridge nodes connected to both sides, so that a node in the
// middle sees both halves (Jepsen's bridge nemesis).
func (n *Net) Bridge(a, bridge, b []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range bridge {
		n.mustLocked(x)
	}
	for _, x := range a {
		n.mustLocked(x)
		for _, y := range b {
			n.mustLocked(y)
			if x != y {
				n.cutLocked(x, y)
			}
		}
	}
}

// OneWay cuts the connections that from initiates towards to; connections
// initiated by to towards from keep working. Replies travel on the
// initiator's connection, so from's requests to to fail entirely while to's
// requests to from still get their replies.
func (n *Net) OneWay(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f, t := n.mustLocked(from), n.mustLocked(to)
	t.proxy.Block(f.ip)
}

// Stall black-holes name in both directions: its connections to and from
// every other node stay open but carry no data until Heal.
func (n *Net) Stall(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	me := n.mustLocked(name)
	for _, o := range n.names {
		if o == name {
			continue
		}
		other := n.nodes[o]
		other.proxy.Stall(me.ip)
		me.proxy.Stall(other.ip)
	}
}

// Delay adds d of latency in both directions on every proxy, so a round
// trip between two nodes gains at least 2d.
func (n *Net) Delay(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, name := range n.names {
		n.nodes[name].proxy.SetDelay(d)
	}
}

// Heal removes every fault on every proxy: blocks, stalls and delay.
// Connections cut earlier stay closed; nodes reconnect on their own.
func (n *Net) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, name := range n.names {
		n.nodes[name].proxy.HealAll()
	}
}

// Close closes every proxy and returns their errors joined.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, name := range n.names {
		if err := n.nodes[name].proxy.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// cutLocked blocks the link between a and b in both directions. n.mu must
// be held.
func (n *Net) cutLocked(a, b string) {
	na, nb := n.nodes[a], n.nodes[b]
	nb.proxy.Block(na.ip)
	na.proxy.Block(nb.ip)
}

// mustLocked returns node name or panics if it was never added. n.mu must
// be held.
func (n *Net) mustLocked(name string) netNode {
	nd, ok := n.nodes[name]
	if !ok {
		panic(fmt.Sprintf("faultproxy: unknown node %q", name))
	}
	return nd
}
