package testchild

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	Main(m, Roles{
		// echo prints ready, then copies stdin lines until "bye".
		"echo": func(t testing.TB) {
			fmt.Println("ready")
			sc := bufio.NewScanner(os.Stdin)
			for sc.Scan() && sc.Text() != "bye" {
				fmt.Println("echo " + sc.Text())
			}
		},
		"sleep": func(t testing.TB) {
			fmt.Println("ready " + os.Getenv("WHO"))
			time.Sleep(time.Hour)
		},
		"fatal": func(t testing.TB) {
			d := t.TempDir()
			t.Cleanup(func() { fmt.Println("cleanup", d) })
			t.Fatalf("role %s gives up", t.Name())
			fmt.Println("not reached")
		},
		"error": func(t testing.TB) { t.Error("a failure") },
	})
}

// TestRoles: a role's output, input, exit status and SIGKILL reach the
// parent.
func TestRoles(t *testing.T) {
	c := Start(t, "echo")
	c.Expect(t, "ready", 10*time.Second)
	fmt.Fprintln(c.Stdin, "x")
	c.Expect(t, "echo x", 10*time.Second)
	fmt.Fprintln(c.Stdin, "bye")
	if err := c.Wait(); err != nil {
		t.Fatalf("echo: %v", err)
	}

	c = Start(t, "sleep", "WHO=me")
	c.Expect(t, "ready me", 10*time.Second)
	c.Kill9()
	var ee *exec.ExitError
	if err := c.Wait(); !errors.As(err, &ee) || ee.String() != "signal: killed" {
		t.Fatalf("after Kill9: %v", err)
	}

	for role, code := range map[string]int{"fatal": 2, "error": 1} {
		c = Start(t, role)
		err := c.Wait()
		if !errors.As(err, &ee) || ee.ExitCode() != code {
			t.Fatalf("%s: %v, want exit status %d", role, err, code)
		}
		out, _ := c.Stdout.ReadString(0)
		if role == "fatal" && (!strings.HasPrefix(out, "cleanup ") || strings.Contains(out, "not reached")) {
			t.Fatalf("fatal printed %q", out)
		}
		if role == "fatal" {
			if _, err := os.Stat(strings.Fields(out)[1]); !os.IsNotExist(err) {
				t.Fatalf("TempDir left after the role: %v", err)
			}
		}
	}
}

// TestExpectChildGone: Expect fails when the child exits without the line.
func TestExpectChildGone(t *testing.T) {
	if os.Getenv("TESTCHILD_INNER") == "1" {
		c := Start(t, "error")
		c.Expect(t, "ready", 10*time.Second)
		return
	}
	out, err := Tests("^TestExpectChildGone$", "TESTCHILD_INNER=1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `before printing "ready"`) {
		t.Fatalf("Expect of a line never printed: %v\n%s", err, out)
	}
}
