package server

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// clusterID is the id of the cluster this node belongs to: the FSM's once
// it has applied it, else what the data dir held at Open; empty for a node
// that has not yet seen its cluster's first leader record one.
func (n *Node) clusterID() string {
	if id := n.fsm.ClusterID(); id != "" {
		return id
	}
	return n.storedClusterID
}

// newClusterID returns a random id for a new cluster.
func newClusterID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a cluster id: %w", err)
	}
	return hex.EncodeToString(b), nil
}
