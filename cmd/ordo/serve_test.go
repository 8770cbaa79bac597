package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// serveEnvNames returns the ORDO_ variables ordo serve reads, from its
// usage text.
func serveEnvNames(t *testing.T) map[string]bool {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	err = runServe([]string{"-h"})
	os.Stderr = stderr
	w.Close()
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("serve -h: %v, want flag.ErrHelp", err)
	}
	usage, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range envVar.FindAllString(string(usage), -1) {
		names[m] = true
	}
	if !names["ORDO_ID"] || !names["ORDO_JOIN"] {
		t.Fatalf("serve -h names no ORDO_ID or ORDO_JOIN:\n%s", usage)
	}
	return names
}

var (
	envVar  = regexp.MustCompile(`ORDO_[A-Z_]+[A-Z]`)
	fileVar = regexp.MustCompile(`\$\{ORDO_[A-Z_]+`)
)

// The deployment examples set ordo serve's settings through ORDO_
// variables; a misspelt one would be ignored in silence.
func TestDeployFilesNameRealSettings(t *testing.T) {
	known := serveEnvNames(t)
	for _, file := range []string{
		"../../deploy/kubernetes/ordo.yaml",
		"../../deploy/docker-compose.yml",
		"../../deploy/systemd/ordo.env.example",
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// ${ORDO_IMAGE} and the like are the file's own variables.
		text := fileVar.ReplaceAllString(string(b), "")
		seen := 0
		for _, name := range envVar.FindAllString(text, -1) {
			seen++
			if !known[name] {
				t.Errorf("%s sets %s, which ordo serve does not read", file, name)
			}
		}
		if seen == 0 {
			t.Errorf("%s names no ORDO_ variable", file)
		}
	}
}

// TestServeMetricsSequences: --metrics-sequences reaches the node's
// configuration (20 by default); out of 1 to 1000 it is a usage error
// naming the range.
func TestServeMetricsSequences(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want int
		err  string
	}{
		{nil, 20, ""},
		{[]string{"--metrics-sequences", "5"}, 5, ""},
		{[]string{"--metrics-sequences", "0"}, 0, "--metrics-sequences 0: want 1 to 1000"},
		{[]string{"--metrics-sequences", "1001"}, 0, "--metrics-sequences 1001: want 1 to 1000"},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		f := newServeFlags(fs)
		args := append([]string{"--id", "n1", "--data-dir", t.TempDir()}, tt.args...)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := f.config(fs, args)
		if tt.err != "" {
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: %v, want a usage error containing %q", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil || cfg.MetricsSequences != tt.want {
			t.Errorf("%q: %d, %v; want %d", tt.args, cfg.MetricsSequences, err, tt.want)
		}
	}
}
