package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/seed-e8569b35/ordo/server"
)

// leaseFlag is --lease: off by default; bare (or "true") turns it on at
// server.DefaultLease; a duration sets it; "false" or 0 turns it off.
// "--lease 2s" is "--lease=2s" (TakesValue).
type leaseFlag struct{ d time.Duration }

func (f *leaseFlag) String() string {
	if f == nil || f.d == 0 {
		return "off"
	}
	return f.d.String()
}

func (f *leaseFlag) Set(v string) error {
	if on, err := strconv.ParseBool(v); err == nil {
		f.d = 0
		if on {
			f.d = server.DefaultLease
		}
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("want true, false, or a duration such as 500ms (0: off)")
	}
	f.d = d
	return nil
}

// IsBoolFlag lets --lease stand alone.
func (f *leaseFlag) IsBoolFlag() bool { return true }

// TakesValue takes the argument after a bare --lease for its value when
// it is one: a duration or a bool.
func (f *leaseFlag) TakesValue(arg string) bool {
	if _, err := strconv.ParseBool(arg); err == nil {
		return true
	}
	_, err := time.ParseDuration(arg)
	return err == nil
}
