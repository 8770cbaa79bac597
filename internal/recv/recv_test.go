package recv

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
)

// from returns a recv that yields msgs, then end.
func from(end error, msgs ...int) func() (int, error) {
	return func() (int, error) {
		if len(msgs) == 0 {
			return 0, end
		}
		m := msgs[0]
		msgs = msgs[1:]
		return m, nil
	}
}

func TestEach(t *testing.T) {
	broken := errors.New("stream broken")
	refused := errors.New("handler refused")
	for _, tt := range []struct {
		name    string
		end     error
		failAt  int // the message the handler refuses; 0: none
		want    error
		handled []int
	}{
		{"ends at EOF", io.EOF, 0, nil, []int{1, 2, 3}},
		{"ends at a wrapped EOF", fmt.Errorf("closed: %w", io.EOF), 0, nil, []int{1, 2, 3}},
		{"ends with the stream's error", broken, 0, broken, []int{1, 2, 3}},
		{"ends with the handler's error", io.EOF, 2, refused, []int{1, 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var handled []int
			err := Each(from(tt.end, 1, 2, 3), func(m int) error {
				handled = append(handled, m)
				if m == tt.failAt {
					return refused
				}
				return nil
			})
			if !errors.Is(err, tt.want) {
				t.Errorf("Each = %v, want %v", err, tt.want)
			}
			if !slices.Equal(handled, tt.handled) {
				t.Errorf("handled %v, want %v", handled, tt.handled)
			}
		})
	}
}
