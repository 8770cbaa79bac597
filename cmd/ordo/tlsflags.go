package main

import (
	"flag"
	"fmt"

	"github.com/seed-e8569b35/ordo/secure"
)

// tlsFlags name the PEM files of mutual TLS, for serve and for every
// command that talks to a cluster.
type tlsFlags struct{ cert, key, ca *string }

func addTLSFlags(fs *flag.FlagSet, whose string) tlsFlags {
	return tlsFlags{
		cert: fs.String("tls-cert", "", whose+" certificate (PEM); with --tls-key and --tls-ca turns on mutual TLS"),
		key:  fs.String("tls-key", "", "private key of --tls-cert (PEM)"),
		ca:   fs.String("tls-ca", "", "the cluster CA's certificate (PEM): peers must present certificates it signed"),
	}
}

// load returns nil when no file is named: plaintext.
func (f tlsFlags) load() (*secure.TLS, error) {
	files := secure.Files{Cert: *f.cert, Key: *f.key, CA: *f.ca}
	if files.Empty() {
		return nil, nil
	}
	t, err := secure.Load(files)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	return t, nil
}
