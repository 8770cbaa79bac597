package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/seed-e8569b35/ordo/internal/buildinfo"
)

// TestVersion: ordo version prints the build's version, revision and Go
// version, as text and as JSON, and takes no arguments.
func TestVersion(t *testing.T) {
	b := buildinfo.Read()
	out, err := output(t, runVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ordo " + b.Version + "\n", "revision " + b.Revision, b.GoVersion + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("ordo version printed %q, want it to contain %q", out, want)
		}
	}
	out, err = output(t, runVersion, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got buildinfo.Info
	if err := json.Unmarshal([]byte(out), &got); err != nil || got != b {
		t.Errorf("ordo version --json: %q (%v), want %+v", out, err, b)
	}
	if _, err := output(t, runVersion, "now"); !errors.Is(err, errUsage) {
		t.Errorf("ordo version now: %v, want a usage error", err)
	}
}
