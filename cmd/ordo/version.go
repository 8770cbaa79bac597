package main

import (
	"flag"
	"fmt"

	"github.com/seed-e8569b35/ordo/internal/buildinfo"
)

// runVersion is ordo version: the module version, VCS revision and Go
// version this binary was built with, as a node's ordo_build_info metric
// labels them.
func runVersion(args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, "ordo version takes only --json"); err != nil {
		return err
	}
	b := buildinfo.Read()
	if *asJSON {
		return printJSON(b)
	}
	modified := ""
	if b.Modified {
		modified = " (modified: built with uncommitted changes)"
	}
	fmt.Printf("ordo %s\nrevision %s%s\n%s\n", b.Version, b.Revision, modified, b.GoVersion)
	return nil
}
