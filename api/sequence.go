package api

import (
	"errors"
	"fmt"
)

// MaxSequenceName is the longest name a named sequence may have.
const MaxSequenceName = 63

// ErrBadSequenceName means a sequence name breaks the syntax
// CheckSequenceName describes.
var ErrBadSequenceName = errors.New("bad sequence name")

// SequenceNameSyntax says what a sequence name may be, for the errors
// that name the fix.
const SequenceNameSyntax = "1 to 63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit"

// CheckSequenceName returns nil if name is a well-formed name of a named
// sequence: 1 to MaxSequenceName characters of lowercase letters, digits,
// '.', '_' and '-', starting with a letter or digit. The empty name, which
// in NextRequest means the cluster's default sequence, is not one.
func CheckSequenceName(name string) error {
	if name == "" || len(name) > MaxSequenceName {
		return fmt.Errorf("%w %q: %d characters, want %s", ErrBadSequenceName, name, len(name), SequenceNameSyntax)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letterOrDigit := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		if !letterOrDigit && (i == 0 || c != '.' && c != '_' && c != '-') {
			return fmt.Errorf("%w %q: %q at position %d, want %s", ErrBadSequenceName, name, c, i+1, SequenceNameSyntax)
		}
	}
	return nil
}
