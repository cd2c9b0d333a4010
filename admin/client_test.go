package admin

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStatusOfStartingDaemonThatExits: a daemon binds its admin socket
// before it mounts and serves it only once it is up; a status sent in
// between waits in the socket's backlog, and when that daemon exits (its
// start failed: a pool device that did not answer) the connection is
// reset. Status then says the daemon closed the connection without
// answering (ErrNotRunning: still starting, or stopped while starting),
// not "connection reset by peer".
func TestStatusOfStartingDaemonThatExits(t *testing.T) {
	dir, err := os.MkdirTemp("", "adm") // short path for the socket
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(sock)
	defer c.Close()
	done := make(chan error, 1)
	go func() { _, err := c.Status(context.Background()); done <- err }()
	time.Sleep(300 * time.Millisecond) // the request is in the backlog, never accepted
	ln.Close()                         // the starting daemon exits
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("status did not return after the daemon's socket closed")
	}
	t.Logf("status: %v", err)
	if !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "still starting") {
		t.Fatalf("status of a daemon that closed its socket while starting = %v; want ErrNotRunning saying it may be still starting", err)
	}
}
