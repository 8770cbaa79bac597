package history

import (
	"sync/atomic"
)

// Ending is how one attempt of a Caller ended. A Judge tells the endings
// of errors apart; the Caller records and counts each ending one way, so
// that every workload (bench's callers, verify's clients and nemesis, and
// the loads of the server and cluster tests) records refused and bad
// answers alike.
type Ending int

const (
	// Answered means the call returned IDs: recorded OK.
	Answered Ending = iota
	// Uncertain means the call may or may not have taken effect (a
	// timeout, a broken connection, a leader change): recorded Unknown.
	Uncertain
	// Refused means the server certainly handed out nothing to this
	// call: recorded Failed.
	Refused
	// BadAnswer means an answer came back and was refused for what it
	// said: it broke the guarantees (a repeat, a step back) or the wire
	// format. The IDs it stood for may have been handed out, so it is
	// recorded Unknown; it holds no IDs the checker could flag, so it is
	// counted apart (Counts.Bad) for the run to fail on.
	BadAnswer
	// CutOff means the end of the run cut the call short: recorded
	// Unknown, and not counted, since it says nothing about the system.
	CutOff
)

// Counts is a snapshot of a Tally. Every attempt but a cut-off one is
// counted in exactly one of OK, Failed, Unknown and Bad.
type Counts struct {
	// OK, Failed and Unknown count the attempts that ended Answered,
	// Refused and Uncertain.
	OK, Failed, Unknown int64
	// Bad counts the attempts that ended BadAnswer.
	Bad int64
	// IDs counts the IDs of the OK attempts.
	IDs int64
	// LastError is the last error counted, or "".
	LastError string
}

// Errors is the number of attempts that ended with an error, cut-off ones
// aside.
func (c Counts) Errors() int64 { return c.Failed + c.Unknown + c.Bad }

// Tally counts attempts as they end, for progress lines and results that
// must not take a snapshot of the history. The zero Tally is ready to use
// and safe for concurrent use.
type Tally struct {
	ok, failed, unknown, bad, ids atomic.Int64
	lastErr                       atomic.Value // string
}

// Counts returns what t has counted so far.
func (t *Tally) Counts() Counts {
	c := Counts{OK: t.ok.Load(), Failed: t.failed.Load(), Unknown: t.unknown.Load(), Bad: t.bad.Load(), IDs: t.ids.Load()}
	c.LastError, _ = t.lastErr.Load().(string)
	return c
}

// Judge says how an attempt that returned err ended: Uncertain, Refused,
// BadAnswer or CutOff (Answered is taken as Uncertain).
type Judge func(err error) Ending

// Caller records one client's attempts in a history and counts them in a
// tally: the one place where an attempt becomes an operation, so every
// workload records and counts alike.
type Caller struct {
	// Rec is the history the attempts are recorded in.
	Rec *Recorder
	// Tally counts the attempts; nil counts nothing.
	Tally *Tally
	// Client is the client number the attempts are recorded under.
	Client int
	// Judge tells how a call that returned an error ended; nil takes
	// every error as Uncertain.
	Judge Judge
}

// Call makes one attempt: it begins an operation before call runs, so the
// recorded interval contains the real one, then records what call
// returned (the IDs in order; under a 128-bit layout their ticks, with
// their text in rendered, else rendered nil) and counts it. It returns
// how the attempt ended and call's error.
func (c Caller) Call(call func() (ids []uint64, rendered []string, err error)) (Ending, error) {
	return c.CallN(0, call)
}

// CallN is Call for an attempt that asks for n IDs, which the history
// records (Op.Asked) so that the dense check can bound what the attempt
// took if it ends unknown.
func (c Caller) CallN(n int, call func() (ids []uint64, rendered []string, err error)) (Ending, error) {
	return c.CallKeyed("", n, call)
}

// CallKeyed is CallN for an attempt of the keyed call key (Op.Key): every
// attempt recorded with one key is one call to the checker, so a caller
// that retries a keyed call records each attempt with its key. The key
// must name the call in the whole history; "" is no key.
func (c Caller) CallKeyed(key string, n int, call func() (ids []uint64, rendered []string, err error)) (Ending, error) {
	p := c.Rec.BeginKeyed(c.Client, n, key)
	ids, rendered, err := call()
	end := Answered
	if err != nil {
		end = Uncertain
		if c.Judge != nil {
			end = c.Judge(err)
		}
		if end != Refused && end != BadAnswer && end != CutOff {
			end = Uncertain // an error never acknowledges IDs
		}
	}
	switch end {
	case Answered:
		if rendered != nil {
			p.OKRendered(ids, rendered)
		} else {
			p.OK(ids)
		}
	case Refused:
		p.Fail(err)
	default:
		p.Unknown(err)
	}
	c.count(end, len(ids), err)
	return end, err
}

// count adds an attempt that ended as end, with n IDs, to c.Tally.
func (c Caller) count(end Ending, n int, err error) {
	t := c.Tally
	if t == nil {
		return
	}
	switch end {
	case Answered:
		t.ok.Add(1)
		t.ids.Add(int64(n))
		return
	case Refused:
		t.failed.Add(1)
	case BadAnswer:
		t.bad.Add(1)
	case CutOff:
		return
	default:
		t.unknown.Add(1)
	}
	t.lastErr.Store(err.Error())
}
