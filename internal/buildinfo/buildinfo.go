// Package buildinfo is what an ordo binary knows of its own build: the
// main module's version, the VCS revision it was built from and the Go
// version, as runtime/debug.ReadBuildInfo reports them. ordo version
// prints them, and a node's ordo_build_info metric carries them.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Unknown stands for what the binary does not record: a build outside a
// VCS checkout has no revision, a test binary no module version.
const Unknown = "unknown"

// Info is one build's description.
type Info struct {
	// Version is the main module's version: a release tag (go install
	// ...@v1.2.0), a pseudo-version of the commit (Go stamps one when it
	// builds in a checkout, with +dirty for uncommitted changes), or
	// "(devel)".
	Version string `json:"version"`
	// Revision is the VCS revision (a git commit hash).
	Revision string `json:"revision"`
	// Modified reports that the working tree had uncommitted changes.
	Modified bool `json:"modified"`
	// GoVersion is the Go release that built the binary.
	GoVersion string `json:"go_version"`
}

// Read describes the running binary.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	return From(bi, ok)
}

// From describes the build bi records (ok as ReadBuildInfo returns it);
// what it lacks is Unknown, and the Go version falls back to the
// runtime's.
func From(bi *debug.BuildInfo, ok bool) Info {
	info := Info{Version: Unknown, Revision: Unknown, GoVersion: runtime.Version()}
	if !ok || bi == nil {
		return info
	}
	if bi.Main.Version != "" {
		info.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if s.Value != "" {
				info.Revision = s.Value
			}
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}
