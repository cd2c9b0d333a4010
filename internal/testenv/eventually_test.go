package testenv

import (
	"testing"
	"time"
)

// TestPoll: Poll returns as soon as the condition holds, and reports
// false, having tried again at the deadline, when it never does.
func TestPoll(t *testing.T) {
	n := 0
	if !Poll(time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Poll stopped after %d calls", n)
	}
	n = 0
	start := time.Now()
	if Poll(20*time.Millisecond, func() bool { n++; return false }) {
		t.Fatal("Poll of a false condition reported true")
	}
	if took := time.Since(start); took < 20*time.Millisecond || n < 2 {
		t.Fatalf("Poll gave up after %v and %d calls", took, n)
	}
}

// fakeTB records a Fatalf instead of ending the test.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msg = format
	if len(args) > 0 {
		f.msg = args[len(args)-1].(string)
	}
}

// TestEventuallyMessage: a condition that never holds fails with the
// caller's message.
func TestEventuallyMessage(t *testing.T) {
	f := &fakeTB{TB: t}
	Eventually(f, 10*time.Millisecond, func() bool { return false }, "the %s", "thing")
	if f.msg != "the thing" {
		t.Fatalf("failure message %q", f.msg)
	}
	f.msg = ""
	Eventually(f, time.Second, func() bool { return true }, "never")
	if f.msg != "" {
		t.Fatalf("a true condition failed: %q", f.msg)
	}
}
