package main

import (
	"fmt"
	"math"
)

// checkCount refuses a --count no request can carry: a request carries
// its count in 32 bits, and the cluster's --max-count bounds it further.
func checkCount(n int) error {
	if n < 1 || int64(n) > math.MaxUint32 {
		return fmt.Errorf("%w: --count %d: want 1 to %d (the cluster's --max-count, 100000 by default, may allow fewer)", errUsage, n, uint32(math.MaxUint32))
	}
	return nil
}
