// Package testchild runs a test binary again as a child process with a
// named role: a process that serves a mount or a store until the parent
// test kills it with SIGKILL, or a writer racing the parent's reader.
//
// The roles are dispatched from TestMain, before any test runs, so a
// child is never a test function that skips itself in the parent's run:
//
//	func TestMain(m *testing.M) {
//		testchild.Main(m, testchild.Roles{"serve": serveChild})
//	}
//
// and a test starts one with Start(t, "serve", "DIR="+dir). Tests returns
// a command that re-runs chosen tests of the binary (for a child that
// needs the testing framework itself).
package testchild

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RoleEnv is the environment variable that names a child's role.
const RoleEnv = "CTXMEM_TEST_CHILD"

// A Role is the body of a child process. t reports to the child's stderr:
// Fatal and FailNow end the process with status 2 (after the cleanups),
// Error marks it failed (status 1 when the role returns). A role that
// returns ends the child with status 0 unless it failed. t supports the
// methods a test helper commonly calls (Helper, Log, Error, Fatal,
// Cleanup, TempDir, Name); others panic.
type Role func(t testing.TB)

// Roles maps role names to their bodies.
type Roles map[string]Role

// Main is the body of a package's TestMain: in a child (RoleEnv set) it
// runs that role and exits; otherwise it runs the tests and exits with
// their status.
func Main(m *testing.M, roles Roles) {
	name, ok := os.LookupEnv(RoleEnv)
	if !ok {
		os.Exit(m.Run())
	}
	if !flag.Parsed() {
		flag.Parse() // testing.Verbose and friends work in a child too
	}
	role := roles[name]
	if role == nil {
		fmt.Fprintf(os.Stderr, "testchild: no role %q in this test binary\n", name)
		os.Exit(2)
	}
	os.Exit(run(name, role))
}

// run runs role as a child and returns its exit status.
func run(name string, role Role) (status int) {
	c := &childTB{name: name}
	defer func() {
		if r := recover(); r != nil && r != errFailNow {
			panic(r)
		}
		c.runCleanups()
		switch {
		case c.fatal:
			status = 2
		case c.failed:
			status = 1
		}
	}()
	role(c)
	return 0
}

// Child is a running child process.
type Child struct {
	// Cmd is the child's command; Cmd.Process is set.
	Cmd *exec.Cmd
	// Stdin writes to the child's standard input.
	Stdin io.WriteCloser
	// Stdout reads the child's standard output. It is a pipe of its own,
	// not closed by the child's exit, so nothing the child wrote is lost.
	Stdout *bufio.Reader

	stdout  *os.File
	done    chan struct{}
	waitErr error
	close   sync.Once
}

// Start starts this test binary again as a child in role, with env (each
// "KEY=value") added to this process's environment. Its stderr is this
// process's. The child is killed, if still running, when t ends.
func Start(t testing.TB, role string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), RoleEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatalf("start child %s: %v", role, err)
	}
	c := &Child{Cmd: cmd, Stdin: stdin, Stdout: bufio.NewReader(r), stdout: r, done: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.Kill()
		<-c.done
		c.close.Do(func() { c.stdout.Close() })
	})
	return c
}

// Done is closed when the child has exited.
func (c *Child) Done() <-chan struct{} { return c.done }

// Wait waits for the child to exit and returns how it did (exec.Cmd.Wait).
func (c *Child) Wait() error {
	<-c.done
	return c.waitErr
}

// Kill sends the child SIGKILL, without waiting for it to exit; a child
// that already exited is left alone.
func (c *Child) Kill() {
	select {
	case <-c.done:
	default:
		_ = c.Cmd.Process.Signal(syscall.SIGKILL)
	}
}

// Kill9 kills the child with SIGKILL and waits until it has exited.
func (c *Child) Kill9() {
	c.Kill()
	<-c.done
}

// Expect reads the child's output until a line equal to line, and fails t
// (after killing the child) when the child ends its output first or
// timeout passes.
func (c *Child) Expect(t testing.TB, line string, timeout time.Duration) {
	t.Helper()
	found := make(chan error, 1)
	go func() {
		for {
			l, err := c.Stdout.ReadString('\n')
			if l != "" && strings.TrimSuffix(l, "\n") == line {
				found <- nil
				return
			}
			if err != nil {
				found <- err
				return
			}
		}
	}()
	select {
	case err := <-found:
		if err != nil {
			c.Kill9()
			t.Fatalf("child exited (%v) before printing %q", c.waitErr, line)
		}
	case <-time.After(timeout):
		c.Kill9()
		<-found
		t.Fatalf("child did not print %q within %v", line, timeout)
	}
}

// Tests returns a command (not started) that runs this test binary again
// with the tests that match run (a -test.run pattern), verbose, with env
// added to this process's environment. It is for a child that must itself
// be a test (a conformance suite run against a deliberately broken tier).
func Tests(run string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run", run, "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	return cmd
}
