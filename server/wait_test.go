package server

import "time"

// seqTestWait bounds every wait in these tests (eventually.True and the
// like). It is a deadline, never a way to let something happen.
const seqTestWait = 10 * time.Second
