package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// TestFrom: the version, revision and Go version come from the build
// info, and what it lacks is Unknown (the Go version: the runtime's).
func TestFrom(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.99.1",
		Main:      debug.Module{Path: "github.com/seed-e8569b35/ordo", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	want := Info{Version: "v1.2.3", Revision: "0123456789abcdef", Modified: true, GoVersion: "go1.99.1"}
	if got := From(bi, true); got != want {
		t.Errorf("From(full) = %+v, want %+v", got, want)
	}
	bare := Info{Version: Unknown, Revision: Unknown, GoVersion: runtime.Version()}
	if got := From(&debug.BuildInfo{}, true); got != bare {
		t.Errorf("From(empty) = %+v, want %+v", got, bare)
	}
	if got := From(nil, false); got != bare {
		t.Errorf("From(none) = %+v, want %+v", got, bare)
	}
	if got := Read(); got.GoVersion == "" || got.Version == "" || got.Revision == "" {
		t.Errorf("Read() = %+v: a field is empty", got)
	}
}
