package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/fabric/pool"
)

// TestOpenPoolHungDevice: a pool device that never answers (its open or
// superblock read blocks, as on a frozen filesystem or a dead NVMe-oF
// path) makes `run` fail after local_read_timeout with an error naming the
// device and the bound (exit 1, so the service manager tries again), and
// an ERROR log line says so. Before, openPool waited for the device
// forever: the daemon never mounted and logged nothing.
func TestOpenPoolHungDevice(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	hung := func(string) (*pool.Pool, error) { <-release; return nil, errors.New("answered late") }
	const timeout = 300 * time.Millisecond
	var logs bytes.Buffer
	d := &daemon{cfg: config.Config{Pool: "/dev/hung-pool", LocalReadTimeout: timeout}, log: slog.New(slog.NewTextHandler(&logs, nil)), poolOpen: hung}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- d.openPool(context.Background()) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("openPool of a hung device did not return in 10 s (local_read_timeout %v)", timeout)
	}
	took := time.Since(start)
	if took > 5*timeout {
		t.Errorf("openPool of a hung device took %v; want about %v", took, timeout)
	}
	var ec *exitError
	if !errors.Is(err, errPoolNoAnswer) || !errors.As(err, &ec) || ec.code != exitFailure ||
		!strings.Contains(err.Error(), "/dev/hung-pool") || !strings.Contains(err.Error(), timeout.String()) {
		t.Fatalf("openPool of a hung device = %v; want exit %d, errPoolNoAnswer naming the path and %v", err, exitFailure, timeout)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "path=/dev/hung-pool") {
		t.Errorf("no ERROR log line naming the pool:\n%s", l)
	}
}
