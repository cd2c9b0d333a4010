package testenv

import (
	"fmt"
	"testing"
	"time"
)

// Poll intervals of Eventually and Poll: the first retry comes quickly,
// then the interval doubles up to the ceiling, so a condition that holds
// soon is seen soon and a slow one is not polled in a tight loop.
const (
	firstPoll = time.Millisecond
	maxPoll   = 100 * time.Millisecond
)

// Eventually calls cond until it returns true, and fails t (Fatalf, with
// the message format and args and how long it waited) when timeout passes
// first. The timeout bounds a hang; it is not a timing assertion. The
// interval between calls starts at 1 ms and doubles up to 100 ms.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, fmt.Sprintf(format, args...))
	}
}

// Poll calls cond until it returns true or timeout passes, with the
// intervals of Eventually, and reports whether cond held. It is for a
// caller that decides itself what a timeout means; cond is always called
// at least once, and once more after the deadline.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for wait := firstPoll; ; wait = min(2*wait, maxPoll) {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(wait, left))
	}
}
