// Package service speaks the systemd service-manager protocol for ctxmemd:
// readiness, status lines, stopping and the watchdog (sd_notify(3) over the
// datagram socket named by NOTIFY_SOCKET, via
// github.com/coreos/go-systemd/v22/daemon). Outside systemd (NOTIFY_SOCKET
// unset) every call is a no-op, so the daemon can call it unconditionally.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Notifier sends sd_notify messages to the service manager. The zero value
// is not usable; build one with New. It is safe for concurrent use (each
// message is one datagram on a fresh connection).
type Notifier struct {
	log     *slog.Logger
	enabled bool
}

// New returns a Notifier that is active when NOTIFY_SOCKET is set in the
// environment at the time of the call, and a no-op otherwise. log receives
// send failures and watchdog check failures (nil: slog.Default()).
func New(log *slog.Logger) *Notifier {
	if log == nil {
		log = slog.Default()
	}
	return &Notifier{log: log, enabled: os.Getenv("NOTIFY_SOCKET") != ""}
}

// Enabled reports whether a service manager is listening (NOTIFY_SOCKET
// was set when New ran).
func (n *Notifier) Enabled() bool { return n.enabled }

// Ready tells the manager that start-up is complete ("READY=1") together
// with a one-line status ("STATUS=status"; omitted when status is empty).
// Call it only once the daemon actually serves (mount usable, listeners
// open): with Type=notify, systemctl start returns at this point. Errors
// are those of writing the datagram; nil when not under systemd.
func (n *Notifier) Ready(status string) error {
	msg := "READY=1"
	if s := oneLine(status); s != "" {
		msg += "\nSTATUS=" + s
	}
	return n.send(msg)
}

// Status replaces the one-line status systemctl status shows
// ("STATUS=line"; newlines in line become spaces). Errors as for Ready.
func (n *Notifier) Status(line string) error {
	return n.send("STATUS=" + oneLine(line))
}

// Stopping tells the manager the daemon has begun an orderly shutdown
// ("STOPPING=1"), so the unmount and final write-back that follow are not
// mistaken for a hang. Errors as for Ready.
func (n *Notifier) Stopping() error {
	return n.send("STOPPING=1")
}

// WatchdogInterval returns the watchdog timeout the manager set
// (WATCHDOG_USEC, honouring WATCHDOG_PID), or 0 when the watchdog is off,
// NOTIFY_SOCKET is unset, or the variables are malformed.
func (n *Notifier) WatchdogInterval() time.Duration {
	if !n.enabled {
		return 0
	}
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		n.log.Warn("systemd watchdog settings ignored", "err", err)
		return 0
	}
	return d
}

// RunWatchdog sends "WATCHDOG=1" every WatchdogInterval()/2, but only
// after check(ctx) has just returned nil: a daemon whose serving loop is
// wedged stops pinging and the manager restarts it after WatchdogSec. Each
// check gets a context with a deadline of half the interval; a check that
// ignores its context and blocks also stops the pings (and this loop) until
// it returns. The first check runs at once. RunWatchdog returns nil when
// ctx ends, or at once when the watchdog is off; it never returns a check
// error (failures are logged, at most once per failing streak, and shown as
// STATUS=).
func (n *Notifier) RunWatchdog(ctx context.Context, check func(context.Context) error) error {
	interval := n.WatchdogInterval()
	if interval <= 0 {
		return nil
	}
	period := interval / 2
	tick := time.NewTicker(period)
	defer tick.Stop()
	failing := false
	for {
		cctx, cancel := context.WithTimeout(ctx, period)
		err := check(cctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err == nil:
			if failing {
				n.log.Info("watchdog check passes again; pinging systemd")
				failing = false
			}
			if serr := n.send("WATCHDOG=1"); serr != nil {
				n.log.Warn("systemd watchdog ping", "err", serr)
			}
		case !failing:
			failing = true
			n.log.Error("watchdog check failed; withholding WATCHDOG=1", "err", err)
			_ = n.Status("watchdog check failing: " + err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (n *Notifier) send(msg string) error {
	if !n.enabled {
		return nil
	}
	if _, err := daemon.SdNotify(false, msg); err != nil {
		return fmt.Errorf("sd_notify %q: %w", strings.SplitN(msg, "=", 2)[0], err)
	}
	return nil
}

// oneLine folds newlines so a status stays one sd_notify assignment.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}
