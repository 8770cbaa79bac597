package main

import (
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"strings"

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

// load returns nil when no file is named: plaintext. A usage error names
// the flag at fault.
func (f tlsFlags) load() (*secure.TLS, error) {
	files := secure.Files{Cert: *f.cert, Key: *f.key, CA: *f.ca}
	if files.Empty() {
		return nil, nil
	}
	switch {
	case files.CA == "":
		return nil, fmt.Errorf("%w: --tls-ca is missing: with --tls-cert or --tls-key, give the cluster CA's certificate", errUsage)
	case files.Cert == "" && files.Key != "":
		return nil, fmt.Errorf("%w: --tls-cert is missing: give the certificate of --tls-key, or neither", errUsage)
	case files.Cert != "" && files.Key == "":
		return nil, fmt.Errorf("%w: --tls-key is missing: give the private key of --tls-cert, or neither", errUsage)
	}
	for _, file := range []struct{ flag, path, kind string }{
		{"tls-ca", files.CA, "CERTIFICATE"}, {"tls-cert", files.Cert, "CERTIFICATE"}, {"tls-key", files.Key, "PRIVATE KEY"},
	} {
		if file.path == "" {
			continue
		}
		if err := pemHolds(file.path, file.kind); err != nil {
			return nil, fmt.Errorf("%w: --%s: %v", errUsage, file.flag, err)
		}
	}
	// The CA alone first, so that a bad CA is not blamed on the pair.
	if _, err := secure.Load(secure.Files{CA: files.CA}); err != nil {
		return nil, fmt.Errorf("%w: --tls-ca: %v", errUsage, err)
	}
	t, err := secure.Load(files)
	if err != nil {
		return nil, fmt.Errorf("%w: --tls-key %q does not go with --tls-cert %q: %v", errUsage, files.Key, files.Cert, err)
	}
	return t, nil
}

// pemHolds refuses a file that cannot be read or holds no PEM block of
// the kind given (a type that ends with it: "PRIVATE KEY" takes "EC
// PRIVATE KEY" too).
func pemHolds(path, kind string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return fmt.Errorf("%s holds no PEM %s", path, strings.ToLower(kind))
		}
		if strings.HasSuffix(block.Type, kind) {
			return nil
		}
	}
}
