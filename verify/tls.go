package verify

import (
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/seed-e8569b35/ordo/secure"
)

// TLS is mutual TLS for a verification: the files of the nodes it starts
// and of its clients, all signed by one cluster CA.
type TLS struct {
	// Node is what every node verify starts serves with: a node
	// certificate that names each node's loopback IP (127.0.0.11, .12,
	// ...). Unused with Config.Addrs.
	Node secure.Files
	// Client is what every workload client presents: the failover
	// clients, the stream and the pinned clients.
	Client secure.Files
	// Admin is what the nemesis presents for everything it asks the
	// cluster: finding the leader, remove and re-add, transfer-leader.
	// The nodes verify starts grant admin to its subject
	// (--admin-subject). Unused with Config.Addrs.
	Admin secure.Files
}

// TLSDir names the files scripts/gen-certs.sh (or securetest.WriteSet)
// writes into dir: ca.pem, node.pem, client.pem, admin.pem and their keys.
func TLSDir(dir string) *TLS {
	f := func(name string) secure.Files {
		return secure.Files{
			Cert: filepath.Join(dir, name+".pem"),
			Key:  filepath.Join(dir, name+"-key.pem"),
			CA:   filepath.Join(dir, "ca.pem"),
		}
	}
	return &TLS{Node: f("node"), Client: f("client"), Admin: f("admin")}
}

// clientConfig loads a client side's files.
func clientConfig(what string, f secure.Files) (*tls.Config, *secure.TLS, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, nil, fmt.Errorf("%w: TLS %s: a certificate and key are required (every node of a TLS cluster refuses a client without one)", ErrBadConfig, what)
	}
	t, err := secure.Load(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: TLS %s: %w", ErrBadConfig, what, err)
	}
	return t.ClientConfig(), t, nil
}

// clusterTLS is what a cluster with TLS needs, loaded and checked: the
// serve flags of every node and the admin's client side.
type clusterTLS struct {
	serveArgs []string
	admin     *tls.Config
}

// loadClusterTLS checks that t's node certificate is one and names every
// node IP, and that the admin certificate's subject can be given to
// --admin-subject.
func loadClusterTLS(t *TLS, ips []string) (*clusterTLS, error) {
	node, err := secure.Load(t.Node)
	if err != nil {
		return nil, fmt.Errorf("%w: TLS node: %w", ErrBadConfig, err)
	}
	leaf := node.Leaf()
	if leaf == nil || !secure.IsNode(leaf) {
		return nil, fmt.Errorf("%w: TLS node: %s is not a node certificate (serverAuth)", ErrBadConfig, t.Node.Cert)
	}
	for _, ip := range ips {
		if !secure.Covers(leaf, ip) {
			return nil, fmt.Errorf("%w: TLS node: %s does not name %s, where verify runs a node (it needs 127.0.0.11 and up, one per node; scripts/gen-certs.sh names 127.0.0.11-15)", ErrBadConfig, t.Node.Cert, ip)
		}
	}
	admin, at, err := clientConfig("admin", t.Admin)
	if err != nil {
		return nil, err
	}
	subject := at.Leaf().Subject.String()
	if strings.Contains(subject, ";") || subject == "" {
		// ordo serve --admin-subject is a ';'-separated list.
		return nil, fmt.Errorf("%w: TLS admin: subject %q cannot be given to --admin-subject (a ';'-separated list)", ErrBadConfig, subject)
	}
	return &clusterTLS{
		serveArgs: []string{
			"--tls-cert", t.Node.Cert, "--tls-key", t.Node.Key, "--tls-ca", t.Node.CA,
			"--admin-subject", subject,
		},
		admin: admin,
	}, nil
}
