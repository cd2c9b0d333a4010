package testchild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
)

// errFailNow unwinds a role that called FailNow (Fatal).
var errFailNow = errors.New("testchild: FailNow")

// childTB is the testing.TB of a role. The embedded interface is nil: a
// method not implemented here panics, which ends the child with a stack.
type childTB struct {
	testing.TB
	name     string
	failed   bool
	fatal    bool
	cleanups []func()
	ctx      context.Context
	cancel   context.CancelFunc
}

func (c *childTB) Helper()           {}
func (c *childTB) Name() string      { return c.name }
func (c *childTB) Failed() bool      { return c.failed }
func (c *childTB) Fail()             { c.failed = true }
func (c *childTB) Log(args ...any)   { fmt.Fprintln(os.Stderr, args...) }
func (c *childTB) Cleanup(f func())  { c.cleanups = append(c.cleanups, f) }
func (c *childTB) Error(args ...any) { c.Log(args...); c.Fail() }
func (c *childTB) Fatal(args ...any) { c.Log(args...); c.FailNow() }
func (c *childTB) Logf(f string, args ...any) {
	fmt.Fprintf(os.Stderr, f+"\n", args...)
}
func (c *childTB) Errorf(f string, args ...any) { c.Logf(f, args...); c.Fail() }
func (c *childTB) Fatalf(f string, args ...any) { c.Logf(f, args...); c.FailNow() }

// FailNow marks the child failed and unwinds the role (to run's recover);
// like testing.T's, it must be called from the role's goroutine.
func (c *childTB) FailNow() {
	c.failed, c.fatal = true, true
	panic(errFailNow)
}

// TempDir returns a new directory, removed when the role ends.
func (c *childTB) TempDir() string {
	d, err := os.MkdirTemp("", "testchild-"+c.name+"-")
	if err != nil {
		c.Fatalf("TempDir: %v", err)
	}
	c.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// Context is cancelled when the role ends (by a cleanup).
func (c *childTB) Context() context.Context {
	if c.ctx == nil {
		c.ctx, c.cancel = context.WithCancel(context.Background())
		c.Cleanup(c.cancel)
	}
	return c.ctx
}

// runCleanups runs the registered cleanups, last first.
func (c *childTB) runCleanups() {
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		c.cleanups[i]()
	}
}
