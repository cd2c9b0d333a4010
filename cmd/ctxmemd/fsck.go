package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/admin"
	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/tiering"
	"github.com/ctxmem/ctxmemd/tiering/g3"
	"github.com/ctxmem/ctxmemd/tiering/g4"
)

// fsckCommands returns the fsck and gc commands (issue 16 item 6).
func fsckCommands() []*cli.Command {
	return []*cli.Command{{
		Name:  "fsck",
		Usage: "verify every block copy in G3, G3.5 and G4 (CRC32C), report and optionally drop what fails",
		Description: "Online (the default): the running daemon reads every copy of every live block below G2 in full, " +
			"each verified by its tier, a few at a time (--concurrency, --rate), each read bounded (--read-timeout), " +
			"and reports per tier copies checked, bytes, corrupt, missing and unreadable (a tier that does not answer: " +
			"not counted as corrupt, never dropped), with the bad copies listed. With --drop every corrupt or missing " +
			"copy is forgotten for good: a dirty block keeps its G2 bytes, a block with another copy reads from it, a " +
			"block with only its G2 copy left is written back again, and an object left with no copy of a block is " +
			"lost (its file is removed; reads fail, never return wrong bytes). Even without --drop a tier stops serving " +
			"a copy that failed its check, as on any read.\n\n" +
			"--offline checks the data directory of a stopped daemon instead: every G3 segment record by record and " +
			"every object of a local (or S3) G4, read-only; it refuses (exit 2) while a daemon answers on the admin " +
			"socket or holds the store's lock.\n\n" +
			"Exit status: 0 clean; 1 bad or unreadable copies found (even if dropped), or a failure; 2 usage or " +
			"configuration error, or a daemon running with --offline; 3 no daemon answers (online).",
		Flags: append(adminFlags(),
			&cli.StringFlag{Name: "tier", Usage: "tiers to check, comma-separated: G3, G3.5, G4 (default: all)"},
			&cli.BoolFlag{Name: "drop", Usage: "forget corrupt and missing copies (online only)"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
			&cli.BoolFlag{Name: "offline", Usage: "check a stopped daemon's data directory (read-only)"},
			&cli.IntFlag{Name: "concurrency", Usage: "copies read at once (1-64)", Value: 4},
			&cli.DurationFlag{Name: "read-timeout", Usage: "bound on each read", Value: 30 * time.Second},
			&cli.StringFlag{Name: "rate", Usage: "read at most this many bytes per second (e.g. 200MiB; default unlimited)"},
			&cli.IntFlag{Name: "max-bad", Usage: "bad copies listed at most", Value: 100},
			&cli.StringFlag{Name: "g3-dir", Usage: "G3 directory for --offline [$CTXMEM_G3_DIR]", DefaultText: "<data_dir>/g3"},
			&cli.StringFlag{Name: "g4", Usage: "G4 store for --offline: file:///dir, s3://bucket/prefix or none [$CTXMEM_G4]", DefaultText: "file://<data_dir>/g4"},
		),
		Action: runFsck,
	}, {
		Name:  "gc",
		Usage: "find block copies in G3, G3.5 and G4 that no live block uses and queue them for deletion",
		Description: "The running daemon lists G3, G3.5 and G4 and queues for deletion every copy no live block uses " +
			"(left by a crash, a failed delete, or put there by hand); the daemon's garbage collector deletes them in " +
			"the background (status shows gc pending). A copy whose block is being written is left alone, and every " +
			"copy is checked again just before it is deleted. --dry-run only reports.\n\n" +
			"Exit status: 0 done; 1 a failure (a tier's listing failed); 2 usage error; 3 no daemon answers.",
		Flags: append(adminFlags(),
			&cli.BoolFlag{Name: "dry-run", Usage: "only report what would be deleted"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		),
		Action: runGC,
	}}
}

// fsckTiers parses --tier.
func fsckTiers(c *cli.Context) ([]string, error) {
	var out []string
	for _, t := range strings.Split(c.String("tier"), ",") {
		if strings.TrimSpace(t) == "" {
			continue
		}
		n, err := tiering.ParseTier(t)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func runFsck(c *cli.Context) error {
	if c.NArg() > 0 {
		return withCode(exitUsage, fmt.Errorf("usage: ctxmemd fsck [flags] (no arguments; got %q)", c.Args().First()))
	}
	tiers, err := fsckTiers(c)
	if err != nil {
		return withCode(exitUsage, err)
	}
	if n := c.Int("concurrency"); n < 1 || n > 64 {
		return withCode(exitUsage, fmt.Errorf("--concurrency %d: want 1-64", n))
	}
	if c.Duration("read-timeout") <= 0 || c.Int("max-bad") < 1 {
		return withCode(exitUsage, errors.New("--read-timeout and --max-bad must be positive"))
	}
	var rate int64
	if v := c.String("rate"); v != "" {
		if rate, err = config.ParseSize(v); err != nil || rate <= 0 {
			return withCode(exitUsage, fmt.Errorf("--rate %q: want a size per second such as 200MiB", v))
		}
	}
	if c.Bool("offline") {
		if c.Bool("drop") {
			return withCode(exitUsage, errors.New("--drop needs the running daemon: the offline check is read-only"))
		}
		return runFsckOffline(c, tiers)
	}
	cl, err := adminClient(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	req := admin.FsckRequest{Tiers: tiers, Drop: c.Bool("drop"), Concurrency: c.Int("concurrency"),
		ReadTimeoutMS: c.Duration("read-timeout").Milliseconds(), BytesPerSecond: rate, MaxBad: c.Int("max-bad")}
	if isTerminal(c.App.ErrWriter) && !c.Bool("json") {
		what := "G3, G3.5 and G4"
		if len(tiers) > 0 {
			what = strings.Join(tiers, ", ")
		}
		fmt.Fprintf(c.App.ErrWriter, "fsck: the daemon is reading every block copy in %s (Ctrl-C stops it)...\n", what)
	}
	start := time.Now()
	rep, err := cl.Fsck(c.Context, req)
	if err != nil {
		return maintErr(c, err, "fsck")
	}
	if c.Bool("json") {
		if err := writeJSONOut(c.App.Writer, rep); err != nil {
			return err
		}
	} else {
		writeFsck(c.App.Writer, rep, time.Since(start))
	}
	if n, u := rep.BadCopies(), rep.Unreadable(); n > 0 || u > 0 {
		return withCode(exitFailure, fmt.Errorf("fsck: %d bad copies, %d unreadable", n, u))
	}
	return nil
}

// maintErr maps an admin error of fsck or gc to its exit status.
func maintErr(c *cli.Context, err error, verb string) error {
	switch {
	case errors.Is(err, admin.ErrNotRunning):
		hint := ""
		if verb == "fsck" {
			hint = "; to check a stopped daemon's data use ctxmemd fsck --offline"
		}
		return withCode(exitNotRunning, fmt.Errorf("%w (is ctxmemd running? use --admin or --data-dir%s)", err, hint))
	case errors.Is(err, admin.ErrBadRequest), errors.Is(err, admin.ErrPermission):
		return withCode(exitUsage, err)
	case c.Context.Err() != nil:
		return withCode(exitInterrupted, err)
	}
	return withCode(exitFailure, err)
}

func writeJSONOut(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// outcomeText describes a bad copy's outcome.
var outcomeText = map[string]string{
	tiering.FsckKept:      "kept",
	tiering.FsckDirty:     "dropped; dirty, write-back stores the G2 bytes",
	tiering.FsckRewritten: "dropped; rewritten from G2",
	tiering.FsckOtherCopy: "dropped; reads from another copy",
	tiering.FsckLost:      "dropped; no copy left: object lost",
}

// writeFsck prints an online fsck report as tables.
func writeFsck(w io.Writer, rep tiering.FsckReport, took time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tCHECKED\tBYTES\tCORRUPT\tMISSING\tUNREADABLE\tSKIPPED\tDROPPED\tNOTE")
	var checked int64
	for _, t := range rep.Tiers {
		checked += t.Checked
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", t.Tier, t.Checked, config.HumanSize(t.Bytes),
			t.Corrupt, t.Missing, t.Unreadable, t.Skipped, t.Dropped, fsckNote(t))
	}
	tw.Flush()
	if len(rep.Bad) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "OBJECT\tPATH\tBLOCK\tTIER\tPROBLEM\tOUTCOME\tOTHER COPIES\tERROR")
		for _, b := range rep.Bad {
			path, others := b.Path, strings.Join(b.OtherCopies, ",")
			if path == "" {
				path = "-"
			}
			if others == "" {
				others = "none"
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", b.Object, path, b.Block, b.Tier, b.Problem,
				outcomeText[b.Outcome], others, b.Error)
		}
		tw.Flush()
		if rep.BadOmitted > 0 {
			fmt.Fprintf(w, "(%d more not listed; see --max-bad)\n", rep.BadOmitted)
		}
	}
	fmt.Fprintln(w)
	bad, unread := rep.BadCopies(), rep.Unreadable()
	switch {
	case bad == 0 && unread == 0:
		fmt.Fprintf(w, "fsck: clean: %s of %s verified in %s\n", plural(checked, "copy"), plural(rep.Objects, "object"), took.Round(time.Millisecond))
	case !rep.Drop:
		fmt.Fprintf(w, "fsck: %s, %d unreadable (of %d checked); run with --drop to forget the bad ones\n", plural(bad, "bad copy"), unread, checked)
	default:
		fmt.Fprintf(w, "fsck: %s dropped, %d unreadable kept (of %d checked); %s rewritten from G2, %s lost\n",
			plural(bad, "bad copy"), unread, checked, plural(rep.Rewritten, "block"), plural(rep.LostObjects, "object"))
	}
}

// fsckNote is the NOTE column of a tier's row: why it was not checked, or
// its health when that is not up (and how many copies its health kept
// fsck from reading).
func fsckNote(t tiering.FsckTierReport) string {
	if t.NotChecked != "" {
		return t.NotChecked
	}
	note := ""
	if t.Health != "" && t.Health != "up" {
		note = strings.ToUpper(t.Health)
		if t.HealthReason != "" {
			note += " (" + t.HealthReason + ")"
		}
	}
	if t.Refused > 0 {
		if note != "" {
			note += "; "
		}
		note += plural(t.Refused, "copy") + " not read: the tier was down or bypassed"
	}
	return note
}

// offlineReport is what fsck --offline prints as JSON.
type offlineReport struct {
	Offline bool             `json:"offline"`
	DataDir string           `json:"data_dir"`
	G3Dir   string           `json:"g3_dir,omitempty"`
	G3      *g3.VerifyReport `json:"g3,omitempty"`
	G4Store string           `json:"g4_store,omitempty"`
	G4      *g4.VerifyReport `json:"g4,omitempty"`
	Notes   []string         `json:"notes,omitempty"`
	// Elapsed is the seconds each tier's check took.
	Elapsed map[string]float64 `json:"elapsed_s,omitempty"`
}

// runFsckOffline checks the data directory of a stopped daemon.
func runFsckOffline(c *cli.Context, tiers []string) error {
	cfg, err := config.FromCLI(c)
	if err != nil {
		return withCode(exitUsage, err)
	}
	want := func(t string) bool { return len(tiers) == 0 || contains(tiers, t) }
	if contains(tiers, tiering.TierG35) {
		return withCode(exitUsage, errors.New("--offline checks G3 and G4 only (the pool's copies are the pool's)"))
	}
	sock := c.String("admin")
	if sock == "" {
		sock = cfg.Admin
	}
	if err := refuseIfRunning(c.Context, sock); err != nil {
		return withCode(exitUsage, err)
	}
	unlock, err := holdMetaLock(filepath.Join(cfg.DataDir, "meta.db"))
	if err != nil {
		return withCode(exitUsage, err)
	}
	defer unlock()
	rep := offlineReport{Offline: true, DataDir: cfg.DataDir, Elapsed: map[string]float64{}}
	progress := func(tier string) func(done, total int) {
		if !isTerminal(c.App.ErrWriter) || c.Bool("json") {
			return nil
		}
		return func(done, total int) {
			fmt.Fprintf(c.App.ErrWriter, "\rfsck: %s %d/%d", tier, done, total)
			if done == total {
				fmt.Fprintln(c.App.ErrWriter)
			}
		}
	}
	if want(tiering.TierG3) {
		if st, err := os.Stat(cfg.G3Dir); err == nil && st.IsDir() {
			start := time.Now()
			r, err := g3.Verify(c.Context, cfg.G3Dir, g3.VerifyOptions{MaxBad: c.Int("max-bad"), Progress: progress("G3 segment")})
			if errors.Is(err, g3.ErrInUse) {
				return withCode(exitUsage, err)
			}
			if err != nil {
				return withCode(exitFailure, fmt.Errorf("G3 %s: %w", cfg.G3Dir, err))
			}
			rep.G3Dir, rep.G3 = cfg.G3Dir, &r
			rep.Elapsed[tiering.TierG3] = time.Since(start).Seconds()
		} else {
			rep.Notes = append(rep.Notes, fmt.Sprintf("no G3 directory at %s", cfg.G3Dir))
		}
	}
	if want(tiering.TierG4) {
		if err := fsckG4Offline(c, cfg, &rep, progress("G4 object")); err != nil {
			return err
		}
	}
	if c.Bool("json") {
		if err := writeJSONOut(c.App.Writer, rep); err != nil {
			return err
		}
	} else {
		writeOffline(c.App.Writer, rep)
	}
	var problems int64
	if rep.G3 != nil {
		problems += rep.G3.Problems()
	}
	if rep.G4 != nil {
		problems += rep.G4.Problems()
	}
	if problems > 0 {
		return withCode(exitFailure, fmt.Errorf("fsck --offline: %d problems found", problems))
	}
	return nil
}

// fsckG4Offline verifies the configured G4 store into rep.
func fsckG4Offline(c *cli.Context, cfg config.Config, rep *offlineReport, progress func(int, int)) error {
	if !cfg.G4Enabled() {
		rep.Notes = append(rep.Notes, "G4 is none")
		return nil
	}
	if dir, ok := cfg.G4Path(); ok {
		// Never create it (opening a Local store would).
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			rep.Notes = append(rep.Notes, fmt.Sprintf("no G4 directory at %s", dir))
			return nil
		}
	}
	store, err := openObjectStore(c.Context, cfg.G4)
	if err != nil {
		return withCode(exitUsage, err)
	}
	start := time.Now()
	r, err := g4.VerifyStore(c.Context, store, g4.VerifyOptions{Timeout: c.Duration("read-timeout"), MaxBad: c.Int("max-bad"), Progress: progress})
	if err != nil {
		return withCode(exitFailure, fmt.Errorf("G4 %s: %w", cfg.G4, err))
	}
	rep.G4Store, rep.G4 = cfg.G4, &r
	rep.Elapsed[tiering.TierG4] = time.Since(start).Seconds()
	return nil
}

// plural renders "1 copy", "2 copies", "3 segments".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// refuseIfRunning fails when a daemon answers on the admin socket (or the
// socket cannot be opened, so one may be running).
func refuseIfRunning(ctx context.Context, sock string) error {
	cl := admin.NewClient(sock)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := cl.Status(ctx)
	switch {
	case err == nil:
		return fmt.Errorf("a daemon (pid %d) is running on %s: stop it for --offline, or run fsck without --offline", st.PID, sock)
	case errors.Is(err, admin.ErrNotRunning):
		return nil
	}
	return fmt.Errorf("cannot tell whether a daemon runs on %s (%v): refusing --offline", sock, err)
}

// holdMetaLock takes a shared lock on the metadata database (bbolt holds
// an exclusive one while the daemon has it open) and returns its release;
// a missing database is no lock to take.
func holdMetaLock(path string) (func(), error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("the store's lock on %s is held: a ctxmemd is using this data directory; stop it for --offline", path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { unix.Close(fd) }, nil
}

// writeOffline prints an offline report as tables.
func writeOffline(w io.Writer, rep offlineReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tWHERE\tCHECKED\tBYTES\tCORRUPT\tOTHER PROBLEMS")
	if r := rep.G3; r != nil {
		fmt.Fprintf(tw, "G3\t%s\t%s, %s in %s\t%s\t%d (%d live)\t%s, %s\n",
			rep.G3Dir, plural(r.Records, "record"), plural(r.Tombstones, "tombstone"), plural(int64(r.Segments), "segment"),
			config.HumanSize(r.Bytes), r.Corrupt, r.CorruptLive, plural(r.DamagedHeaders, "damaged header"), plural(r.BadSegments, "bad segment"))
	}
	if r := rep.G4; r != nil {
		fmt.Fprintf(tw, "G4\t%s\t%s\t%s\t%d\t%d unreadable, %d foreign\n",
			rep.G4Store, plural(r.Objects, "object"), config.HumanSize(r.Bytes), r.Corrupt, r.Unreadable, r.Foreign)
	}
	tw.Flush()
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if rep.G3 != nil && len(rep.G3.Bad) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SEGMENT\tOFFSET\tKEY\tPROBLEM\tLIVE\tEFFECT")
		for _, b := range rep.G3.Bad {
			key := "-"
			if b.Problem == g3.ProblemPayloadCRC {
				key = fmt.Sprintf("%s/%d/%d@%d", b.Namespace, b.Object, b.Index, b.Gen)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%v\t%s\n", b.Segment, b.Offset, key, b.Problem, b.Live, b.Effect)
		}
		tw.Flush()
		if rep.G3.BadOmitted > 0 {
			fmt.Fprintf(w, "(%d more G3 problems not listed)\n", rep.G3.BadOmitted)
		}
	}
	if rep.G4 != nil && len(rep.G4.Bad) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "OBJECT NAME\tPROBLEM\tERROR")
		for _, b := range rep.G4.Bad {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", b.Name, b.Problem, b.Error)
		}
		tw.Flush()
		if rep.G4.BadOmitted > 0 {
			fmt.Fprintf(w, "(%d more G4 problems not listed)\n", rep.G4.BadOmitted)
		}
	}
	var problems int64
	if rep.G3 != nil {
		problems += rep.G3.Problems()
	}
	if rep.G4 != nil {
		problems += rep.G4.Problems()
	}
	fmt.Fprintln(w)
	if problems == 0 {
		extra := ""
		if rep.G3 != nil && rep.G3.Corrupt > 0 {
			extra = fmt.Sprintf(" (%d corrupt records superseded by newer records or tombstones: never read, reclaimed with their segments)", rep.G3.Corrupt)
		}
		fmt.Fprintf(w, "fsck --offline: clean%s\n", extra)
	} else {
		fmt.Fprintf(w, "fsck --offline: %d problems (nothing changed; start the daemon and run ctxmemd fsck --drop to forget bad copies)\n", problems)
	}
}

func runGC(c *cli.Context) error {
	if c.NArg() > 0 {
		return withCode(exitUsage, fmt.Errorf("usage: ctxmemd gc [--dry-run] [--json] (no arguments; got %q)", c.Args().First()))
	}
	cl, err := adminClient(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	rep, err := cl.CollectGarbage(c.Context, admin.GCRequest{DryRun: c.Bool("dry-run")})
	if err != nil {
		return maintErr(c, err, "gc")
	}
	if c.Bool("json") {
		if err := writeJSONOut(c.App.Writer, rep); err != nil {
			return err
		}
	} else {
		writeGC(c.App.Writer, rep)
	}
	for _, t := range rep.Tiers {
		if t.Error != "" {
			return withCode(exitFailure, fmt.Errorf("gc: %s: %s", t.Tier, t.Error))
		}
	}
	return nil
}

// writeGC prints a gc report as a table.
func writeGC(w io.Writer, rep tiering.GCReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tLISTED\tGARBAGE\tBYTES\tQUEUED\tALREADY QUEUED\tBUSY\tNOTE")
	for _, t := range rep.Tiers {
		note := t.Skipped
		if t.Error != "" {
			note = "listing failed: " + t.Error
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%d\t%s\n", t.Tier, t.Listed, t.Garbage, config.HumanSize(t.Bytes),
			t.Queued, t.AlreadyQueued, t.Busy, note)
	}
	tw.Flush()
	n, b := rep.Garbage()
	switch {
	case n == 0:
		fmt.Fprintln(w, "gc: no garbage")
	case rep.DryRun:
		fmt.Fprintf(w, "gc: %s (%s) no live block uses; dry run: nothing queued\n", plural(n, "copy"), config.HumanSize(b))
	default:
		fmt.Fprintf(w, "gc: %s (%s) no live block uses, queued for deletion; the daemon deletes them in the background (status: gc pending)\n",
			plural(n, "copy"), config.HumanSize(b))
	}
}

// Fsck implements admin.Fscker.
func (d *daemon) Fsck(ctx context.Context, req admin.FsckRequest) (tiering.FsckReport, error) {
	rep, err := d.store.Fsck(ctx, tiering.FsckOptions{Tiers: req.Tiers, Drop: req.Drop, Concurrency: req.Concurrency,
		ReadTimeout: time.Duration(req.ReadTimeoutMS) * time.Millisecond, BytesPerSecond: req.BytesPerSecond,
		MaxBad: req.MaxBad, Name: d.objectName})
	return rep, maintProviderErr(err)
}

// CollectGarbage implements admin.Collector.
func (d *daemon) CollectGarbage(ctx context.Context, req admin.GCRequest) (tiering.GCReport, error) {
	rep, err := d.store.CollectGarbage(ctx, tiering.GCOptions{DryRun: req.DryRun})
	return rep, maintProviderErr(err)
}

// maintProviderErr maps the store's errors to the admin ones (400, 409).
func maintProviderErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tiering.ErrInvalid):
		return fmt.Errorf("%w: %v", admin.ErrBadRequest, err)
	case errors.Is(err, tiering.ErrBusy):
		return fmt.Errorf("%w: %v", admin.ErrBusy, err)
	}
	return err
}

// objectName names an object for fsck's report: its file's path on the
// mount ("ns/dir/file"), or "" (an NBD export, a file already removed).
func (d *daemon) objectName(id tiering.ObjectID) string {
	if d.names == nil {
		return ""
	}
	if ns, p, ok := d.names.Path(id); ok {
		return ns + "/" + p
	}
	return ""
}
