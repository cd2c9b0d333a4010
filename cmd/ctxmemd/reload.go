package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/urfave/cli/v2"

	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/tiering"
)

// reloadable are the config keys a reload applies to the running daemon;
// a change to any other key is logged as needing a restart.
var reloadable = map[string]bool{"dram": true, "dram_high": true, "dram_low": true, "dirty_bytes": true, "log_level": true}

// watchConfig re-reads the configuration on SIGHUP and whenever the config
// file changes (fsnotify on its directory, so editors that write a new file
// and rename it over the old one are seen too), until ctx ends.
func (d *daemon) watchConfig(ctx context.Context, c *cli.Context) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var events <-chan fsnotify.Event
	var errs <-chan error
	if d.cfg.File != "" {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return fmt.Errorf("watch config: %w", err)
		}
		defer w.Close()
		if err := w.Add(filepath.Dir(d.cfg.File)); err != nil {
			return fmt.Errorf("watch config %s: %w", d.cfg.File, err)
		}
		events, errs = w.Events, w.Errors
	}
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			d.log.Info("SIGHUP: reloading config", "file", d.cfg.File)
			d.reload(c)
		case ev := <-events:
			if filepath.Clean(ev.Name) == filepath.Clean(d.cfg.File) && !ev.Has(fsnotify.Chmod) {
				debounce = time.After(200 * time.Millisecond) // editors write in several steps
			}
		case err := <-errs:
			d.log.Warn("config watch", "err", err)
		case <-debounce:
			d.log.Info("config file changed: reloading", "file", d.cfg.File)
			d.reload(c)
		}
	}
}

// reload loads the configuration again (same flags and environment) and
// applies the reloadable settings; an invalid file keeps the running
// configuration.
func (d *daemon) reload(c *cli.Context) {
	next, err := config.FromCLI(c)
	if err != nil {
		d.log.Error("config reload failed: keeping the running config", "err", err)
		return
	}
	cur := summaryMap(d.running)
	var applied, restart []string
	for k, v := range summaryMap(next) {
		if cur[k] == v {
			continue
		}
		if reloadable[k] {
			applied = append(applied, k)
		} else {
			restart = append(restart, k)
		}
	}
	if len(applied) > 0 {
		if err := d.store.SetG2Limits(tiering.G2Limits{Bytes: next.DRAM, High: next.DRAMHigh, Low: next.DRAMLow, Dirty: next.DirtyBytes}); err != nil {
			d.log.Error("config reload: G2 limits refused: keeping the running config", "err", err)
			return
		}
		d.level.Set(next.SlogLevel())
		d.running = next
		d.log.Info("config reloaded", "applied", strings.Join(applied, ","))
	}
	if len(restart) > 0 {
		d.log.Warn("config changes need a restart to apply", "keys", strings.Join(restart, ","))
	}
	if len(applied) == 0 && len(restart) == 0 {
		d.log.Info("config reload: nothing changed")
	}
}

// summaryMap maps each option key to its value as cfg.Summary renders it
// (namespaces and exports under their own keys).
func summaryMap(cfg config.Config) map[string]string {
	m := map[string]string{}
	for _, line := range cfg.Summary() {
		if k, v, ok := strings.Cut(line, " = "); ok {
			if i := strings.LastIndex(v, " ("); i >= 0 {
				v = v[:i] // drop "(source)"
			}
			m[k] = v
		} else {
			m["namespaces"] += line + "\n"
		}
	}
	m["exports"] = fmt.Sprint(cfg.Exports)
	delete(m, "config file")
	return m
}
