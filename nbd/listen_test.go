package nbd

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListenUnix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	ln, err := Listen("unix://" + path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v mode %v", err, fi.Mode())
	}
	if ln.Addr().String() != path {
		t.Errorf("Addr %q", ln.Addr())
	}
	if _, err := Listen("unix://" + path); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second listener on a live socket: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("temporary socket left behind: %v", ents)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket not removed on Close: %v", err)
	}

	// A stale socket (no server) is replaced.
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	ln, err = Listen("unix://" + path)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	ln.Close()

	// A regular file is never removed.
	if err := os.WriteFile(path, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen("unix://" + path); err == nil {
		t.Fatal("listening over a regular file")
	}
	if b, _ := os.ReadFile(path); string(b) != "keep" {
		t.Fatal("regular file clobbered")
	}
}

func TestListenTCPAndBadURLs(t *testing.T) {
	ln, err := Listen("tcp://:0")
	if err != nil {
		t.Fatal(err)
	}
	if a := ln.Addr().(*net.TCPAddr); !a.IP.IsLoopback() {
		t.Errorf("tcp with no host listens on %v, want loopback", a)
	}
	ln.Close()
	ln, err = Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A server on TCP answers nbd handshakes.
	st := newStore(t, 64<<20)
	srv, err := NewServer(context.Background(), st, []Export{{Name: "t", Size: 1 << 20}}, Options{StateDir: st.dir, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- srv.Serve(ctx, ln) }()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var hello [18]byte
	if _, err := nc.Read(hello[:]); err != nil || string(hello[:8]) != "NBDMAGIC" {
		t.Fatalf("greeting %q %v", hello[:8], err)
	}
	nc.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	for _, u := range []string{"", "/tmp/x.sock", "unix://relative", "unix:///a?x=1", "http://x", "tcp://1.2.3.4:1/path", "::"} {
		if l, err := Listen(u); err == nil {
			l.Close()
			t.Errorf("Listen(%q) accepted", u)
		}
	}
}
