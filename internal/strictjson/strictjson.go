// Package strictjson decodes JSON that Ordo wrote itself and must read
// back exactly: Raft log commands and snapshots (package fsm) and backup
// files (package server). A field this build does not know, or anything
// after the value, means the data was written by another version or
// damaged, and reading it leniently could lose state (a high-water mark)
// without a word.
package strictjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ErrTrailingData means something follows the one JSON value.
var ErrTrailingData = errors.New("trailing data")

// Decode decodes exactly one JSON value from r into v, refusing fields
// that v does not have and anything after the value.
func Decode(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return fmt.Errorf("%w: %w", ErrTrailingData, err)
		}
		return fmt.Errorf("%w: %v", ErrTrailingData, tok)
	}
	return nil
}
