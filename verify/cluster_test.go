package verify

import (
	"fmt"
	"testing"
)

// TestAddedNodesNeverShareAnIP: the nodes a fault adds (grow-shrink) take
// the IPs right after the members', and a node a test adds takes one that
// neither the members nor a fault's nodes hold, in either order, so a
// partition of one never cuts off the other.
func TestAddedNodesNeverShareAnIP(t *testing.T) {
	c := &Cluster{}
	for i := range 3 {
		c.Nodes = append(c.Nodes, &Node{Name: fmt.Sprintf("n%d", i+1), IP: nodeIP(i)})
	}
	if a, b := c.unusedIP(0, false), c.unusedIP(1, false); a != 3 || b != 4 {
		t.Fatalf("a fault's nodes get IPs %d and %d, want 3 and 4, right after the members'", a, b)
	}
	c.extra = []*Node{{Name: "g1", IP: nodeIP(3)}, {Name: "g2", IP: nodeIP(4)}}
	added := c.unusedIP(0, true)
	if added != 5 {
		t.Fatalf("a node a test adds gets IP %d beside a fault's nodes at 3 and 4, want 5", added)
	}
	c.Nodes = append(c.Nodes, &Node{Name: "n4", IP: nodeIP(added)})
	seen := map[int]bool{added: true}
	for i := range 2 {
		ip := c.unusedIP(i, false)
		if seen[ip] {
			t.Fatalf("a fault's node %d gets IP %d, which another node holds", i, ip)
		}
		seen[ip] = true
	}
}
