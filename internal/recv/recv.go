// Package recv reads a gRPC stream to its end, the loop each of Ordo's
// stream handlers runs: one copy of the rule that the other side's
// io.EOF ends a stream cleanly and any other error ends it with that
// error.
package recv

import (
	"errors"
	"io"
)

// Each calls handle with every message recv returns, in order, until the
// other side is done sending (io.EOF: Each returns nil), recv fails, or
// handle fails; then it returns that error.
func Each[M any](recv func() (M, error), handle func(M) error) error {
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := handle(m); err != nil {
			return err
		}
	}
}
