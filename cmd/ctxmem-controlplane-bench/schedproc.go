package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/ctxmem/ctxmemd/sidecar/bus"
	"github.com/ctxmem/ctxmemd/sidecar/msg"
	"github.com/ctxmem/ctxmemd/sidecar/scheduler"
)

// statsEvery is how often the scheduler child prints its counters.
const statsEvery = 100 * time.Millisecond

// runSchedulerChild is the -role scheduler mode: one scheduler replica
// connected to url, printing its Stats as one JSON line every statsEvery
// on w until ctx ends. It runs in its own process so that its CPU time is
// measured apart from the simulated hosts'.
func runSchedulerChild(ctx context.Context, url string, w io.Writer) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	nc, err := bus.Connect(bus.Options{URL: url, Name: "ctxmem-bench scheduler", Log: log}, false)
	if err != nil {
		return err
	}
	defer nc.Close()
	s, err := scheduler.New(scheduler.Config{Names: msg.For("bench"), ID: "bench-scheduler", Grace: loopGrace, Log: log})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, nc) }()
	enc := json.NewEncoder(w)
	t := time.NewTicker(statsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return <-done
		case err := <-done:
			return err
		case <-t.C:
			if err := enc.Encode(s.Stats()); err != nil {
				cancel()
				<-done
				return err
			}
		}
	}
}

// schedProc is the scheduler child process seen from the parent.
type schedProc struct {
	pid    int
	mu     sync.Mutex
	latest scheduler.Stats
	cmd    *exec.Cmd
	done   chan struct{}
}

// startSchedProc starts this program as a scheduler child connected to
// url and follows its counters.
func startSchedProc(url string) (*schedProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-role", "scheduler", "-url", url)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the scheduler process: %w", err)
	}
	p := &schedProc{pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() { // owned by stop: ends when the child closes its stdout
		defer close(p.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var st scheduler.Stats
			if json.Unmarshal(sc.Bytes(), &st) == nil {
				p.mu.Lock()
				p.latest = st
				p.mu.Unlock()
			}
		}
		_ = cmd.Wait()
	}()
	return p, nil
}

// stats returns the child's latest counters.
func (p *schedProc) stats() scheduler.Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latest
}

// stop ends the child (SIGTERM, then SIGKILL after 10 s) and waits.
func (p *schedProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
