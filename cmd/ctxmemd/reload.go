package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/urfave/cli/v2"

	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/fusefs"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g3"
)

// Config keys a reload applies to the running daemon, by group; a change
// to any other key (and the removal or change of a namespace) is logged as
// needing a restart. New namespaces are added live (see reloadNamespaces).
var (
	g2Keys    = []string{"dram", "dram_high", "dram_low", "dirty_bytes"}
	g3Keys    = []string{"g3_size", "g3_high", "g3_low"}
	heatKeys  = []string{"cold_threshold", "warm_threshold", "heat_half_life"}
	otherKeys = []string{"log_level"}
)

// nsKey is the summaryMap key of the namespaces list.
const nsKey = "namespaces"

func reloadable(key string) bool {
	for _, g := range [][]string{g2Keys, g3Keys, heatKeys, otherKeys} {
		if slices.Contains(g, key) {
			return true
		}
	}
	return false
}

// watchConfig re-reads the configuration on SIGHUP and whenever the config
// file changes (fsnotify on its directory, so editors that write a new file
// and rename it over the old one are seen too), until ctx ends.
func (d *daemon) watchConfig(ctx context.Context, c *cli.Context) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	d.syncHeatKnobs()
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
	// A change made between loading the config and watching it would be
	// missed: compare once now (quietly when nothing changed).
	if d.cfg.File != "" {
		d.reload(ctx, c, true)
	}
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			d.log.Info("SIGHUP: reloading config", "file", d.cfg.File)
			d.reload(ctx, c, false)
		case ev := <-events:
			if filepath.Clean(ev.Name) == filepath.Clean(d.cfg.File) && !ev.Has(fsnotify.Chmod) {
				debounce = time.After(200 * time.Millisecond) // editors write in several steps
			}
		case err := <-errs:
			d.log.Warn("config watch", "err", err)
		case <-debounce:
			d.log.Info("config file changed: reloading", "file", d.cfg.File)
			d.reload(ctx, c, false)
		}
	}
}

// syncHeatKnobs makes the core's heat knobs those of the running config:
// tiering.Config has no warm threshold, so warm_threshold takes effect here.
func (d *daemon) syncHeatKnobs() {
	want := heatKnobs(d.running)
	if d.store.HeatKnobs() == want {
		return
	}
	if err := d.store.SetHeatKnobs(want); err != nil {
		d.log.Warn("heat thresholds from the config refused; the core keeps its defaults", "err", err)
	}
}

func heatKnobs(c config.Config) tiering.HeatKnobs {
	return tiering.HeatKnobs{Cold: c.ColdThreshold, Warm: c.WarmThreshold, HalfLife: c.HeatHalfLife}
}

// reload loads the configuration again (same flags and environment) and
// applies the reloadable settings. It is all or nothing for settings: an
// invalid file, or a value a component refuses, keeps the whole running
// configuration (settings already applied are set back). New namespaces
// are added after every setting has been applied; a namespace that cannot
// be added live is logged, the others are still added. quiet leaves out
// the "nothing changed" line.
func (d *daemon) reload(ctx context.Context, c *cli.Context, quiet bool) {
	next, err := config.FromCLI(c)
	if err != nil {
		d.log.Error("config reload failed: keeping the running config", "err", err)
		return
	}
	if next.G3Size > 0 && next.G3Size > d.running.G3Size {
		// The clamp of the start applies to a reload too (FitCapacity).
		if fit, clamped, err := g3.FitCapacity(next.G3Dir, next.G3Size, next.G3SegmentSize); err == nil && clamped {
			next.G3Size = max(fit, min(d.running.G3Size, next.G3Size))
		}
	}
	cur, nm := summaryMap(d.running), summaryMap(next)
	changed := map[string]bool{}
	for _, m := range []map[string]string{cur, nm} {
		for k := range m {
			if cur[k] != nm[k] && k != nsKey {
				changed[k] = true
			}
		}
	}
	var applied, restart []string
	for k := range changed {
		if reloadable(k) {
			applied = append(applied, k)
		} else {
			restart = append(restart, k)
		}
	}
	changedIn := func(keys []string) bool { return slices.ContainsFunc(keys, func(k string) bool { return changed[k] }) }
	// G3 can be resized, not switched on or off.
	if changed["g3_size"] && (d.g3 == nil || next.G3Size == 0) {
		applied = slices.DeleteFunc(applied, func(k string) bool { return k == "g3_size" })
		restart = append(restart, "g3_size (enabling or disabling G3)")
		delete(changed, "g3_size")
	}
	added, nsRestart := planNamespaces(fuseNamespaces(d.running), fuseNamespaces(next))
	restart = append(restart, nsRestart...)

	var undo []func()
	rollback := func(what string, err error) {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		d.log.Error("config reload: "+what+" refused: keeping the running config", "err", err)
	}
	if changedIn(heatKeys) {
		old := d.store.HeatKnobs()
		if err := d.store.SetHeatKnobs(heatKnobs(next)); err != nil {
			rollback("heat thresholds", err)
			return
		}
		undo = append(undo, func() { _ = d.store.SetHeatKnobs(old) })
	}
	if changedIn(g2Keys) {
		if err := d.store.SetG2Limits(g2Limits(next)); err != nil {
			rollback("G2 limits", err)
			return
		}
		undo = append(undo, func() { _ = d.store.SetG2Limits(g2Limits(d.running)) })
	}
	if old, ok := d.store.G3Limits(); changedIn(g3Keys) && ok {
		if err := d.store.SetG3Limits(ctx, tiering.G3Limits{CapacityBytes: next.G3Size, HighWatermark: next.G3High, LowWatermark: next.G3Low}); err != nil {
			rollback("G3 limits", err)
			return
		}
		undo = append(undo, func() { _ = d.store.SetG3Limits(ctx, old) })
	}
	d.level.Set(next.SlogLevel())
	if len(added) > 0 {
		applied = append(applied, nsKey)
	}
	restart = append(restart, d.addNamespaces(added)...)
	d.running = next
	d.setValues(next)

	slices.Sort(applied)
	slices.Sort(restart)
	if len(applied) > 0 {
		d.log.Info("config reloaded", append([]any{"applied", strings.Join(applied, ",")}, d.liveSettings()...)...)
	}
	if len(restart) > 0 {
		d.log.Warn("config changes need a restart to apply", "keys", strings.Join(restart, ","))
	}
	if len(applied) == 0 && len(restart) == 0 && !quiet {
		d.log.Info("config reload: nothing changed")
	}
}

func g2Limits(c config.Config) tiering.G2Limits {
	return tiering.G2Limits{Bytes: c.DRAM, High: c.DRAMHigh, Low: c.DRAMLow, Dirty: c.DirtyBytes}
}

// liveSettings returns the reloadable settings as the running components
// report them (not as the file says), as slog key-value pairs.
func (d *daemon) liveSettings() []any {
	k := d.store.HeatKnobs()
	out := []any{"cold_threshold", k.Cold, "warm_threshold", k.Warm, "heat_half_life", k.HalfLife.String()}
	for _, t := range d.store.Occupancy() {
		if t.Name == tiering.TierG2 {
			out = append(out, "dram", config.FormatSize(t.CapacityBytes), "dram_high", t.HighWatermark, "dram_low", t.LowWatermark)
		}
	}
	if l, ok := d.store.G3Limits(); ok {
		out = append(out, "g3_size", config.FormatSize(l.CapacityBytes), "g3_high", l.HighWatermark, "g3_low", l.LowWatermark)
	}
	if d.fuse != nil {
		var names []string
		for _, ns := range d.fuse.Namespaces() {
			names = append(names, ns.Name)
		}
		out = append(out, "namespaces", strings.Join(names, ","))
	}
	return append(out, "log_level", d.level.Level().String())
}

// planNamespaces compares the served namespaces of two configurations: the
// new ones can be added live; a removed or changed one needs a restart
// (its keys for the log are returned).
func planNamespaces(cur, next []fusefs.Namespace) (added []fusefs.Namespace, restart []string) {
	old := map[string]fusefs.Namespace{}
	for _, ns := range cur {
		old[ns.Name] = ns
	}
	seen := map[string]bool{}
	for _, ns := range next {
		seen[ns.Name] = true
		o, ok := old[ns.Name]
		switch {
		case !ok:
			added = append(added, ns)
		case !o.SameIdentity(ns):
			restart = append(restart, nsKey+"["+ns.Name+"] (identity changed: at the next start it starts EMPTY and its files are deleted)")
		case o != ns:
			restart = append(restart, nsKey+"["+ns.Name+"] (changed)")
		}
	}
	for _, ns := range cur {
		if !seen[ns.Name] {
			restart = append(restart, nsKey+"["+ns.Name+"] (removed)")
		}
	}
	return added, restart
}

// addNamespaces adds each namespace to the mount and returns the log keys
// of those that need a restart instead.
func (d *daemon) addNamespaces(nss []fusefs.Namespace) (restart []string) {
	for _, ns := range nss {
		err := d.fuse.AddNamespace(ns)
		switch {
		case err == nil:
		case errors.Is(err, fusefs.ErrNamespaceExists):
			d.log.Info("config reload: namespace already served", "namespace", ns.Name)
		case errors.Is(err, fusefs.ErrNeedsRestart):
			restart = append(restart, nsKey+"["+ns.Name+"] (recorded by an earlier mount with another identity: at the next start it starts EMPTY and its files are deleted)")
		default:
			d.log.Error("config reload: namespace not added", "namespace", ns.Name, "err", err)
		}
	}
	return restart
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
			m[nsKey] += line + "\n"
		}
	}
	m["exports"] = fmt.Sprint(cfg.Exports)
	delete(m, "config file")
	return m
}
