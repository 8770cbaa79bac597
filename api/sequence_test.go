package api

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckSequenceName(t *testing.T) {
	for _, ok := range []string{"a", "0", "invoices", "tenant-42.orders_v2", "9-", strings.Repeat("x", MaxSequenceName)} {
		if err := CheckSequenceName(ok); err != nil {
			t.Errorf("CheckSequenceName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", ".a", "_a", "Invoices", "a/b", "a b", "é", "a\x00", strings.Repeat("x", MaxSequenceName+1)} {
		if err := CheckSequenceName(bad); !errors.Is(err, ErrBadSequenceName) {
			t.Errorf("CheckSequenceName(%q) = %v, want ErrBadSequenceName", bad, err)
		}
	}
}
