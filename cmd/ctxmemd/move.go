package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/ctxmem/ctxmemd/admin"
)

// moveOps are the per-file verbs of the local daemon: each acts on the
// regular files named, and on every regular file under the directories
// named, through the admin socket (no control plane needed).
var moveOps = []struct {
	name, usage string
	do          func(context.Context, *admin.Client, string) error
	aliases     []string
}{
	{"evict", "move files' blocks out of G2 (dirty ones written back first), as the scheduler's demote does; alias demote",
		func(ctx context.Context, c *admin.Client, p string) error { return c.Evict(ctx, p) }, []string{"demote"}},
	{"sink", "move every block of the files to G4",
		func(ctx context.Context, c *admin.Client, p string) error { return c.Sink(ctx, p) }, nil},
	{"warmup", "bring every block of the files to G2 and wait until they are there",
		func(ctx context.Context, c *admin.Client, p string) error { return c.Warmup(ctx, p) }, nil},
	{"pin", "pin the files in G2 (at most half of G2 may be pinned)",
		func(ctx context.Context, c *admin.Client, p string) error { return c.SetPinned(ctx, p, true) }, nil},
	{"unpin", "unpin the files",
		func(ctx context.Context, c *admin.Client, p string) error { return c.SetPinned(ctx, p, false) }, nil},
}

// moveCommands returns the evict, sink, warmup, pin and unpin commands.
func moveCommands() []*cli.Command {
	var cmds []*cli.Command
	for _, op := range moveOps {
		cmds = append(cmds, &cli.Command{
			Name:      op.name,
			Aliases:   op.aliases,
			Usage:     op.usage,
			ArgsUsage: "PATH...",
			Description: "PATHs are files or directories on the mount (directories are walked recursively). " +
				"Works with --nats none: it talks to the local daemon's admin socket. Exit status 1 when some " +
				"file failed (each failure is printed), 2 for a path outside the mount, 3 when no daemon answers.",
			Flags:  append(adminFlags(), &cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress bar"}),
			Action: func(c *cli.Context) error { return runMove(c, op.name, op.do) },
		})
	}
	return cmds
}

func runMove(c *cli.Context, name string, do func(context.Context, *admin.Client, string) error) error {
	if c.NArg() == 0 {
		return withCode(exitUsage, fmt.Errorf("usage: ctxmemd %s [flags] PATH...", name))
	}
	cl, err := adminClient(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	st, err := cl.Status(c.Context)
	if err != nil {
		return adminErr(err)
	}
	files, err := mountFiles(st.Mount, c.Args().Slice())
	if err != nil {
		return withCode(exitUsage, err)
	}
	var bar *progressbar.ProgressBar
	if f, ok := c.App.ErrWriter.(*os.File); ok && !c.Bool("quiet") && term.IsTerminal(int(f.Fd())) {
		bar = progressbar.NewOptions(len(files), progressbar.OptionSetWriter(f), progressbar.OptionSetDescription(name),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	failed := 0
	for _, rel := range files {
		if err := c.Context.Err(); err != nil {
			return withCode(exitInterrupted, err)
		}
		if err := do(c.Context, cl, rel); err != nil {
			if errors.Is(err, admin.ErrNotRunning) || errors.Is(err, admin.ErrPermission) {
				return adminErr(err)
			}
			failed++
			fmt.Fprintf(c.App.ErrWriter, "ctxmemd %s: %s: %v\n", name, rel, err)
		}
		if bar != nil {
			_ = bar.Add(1)
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	fmt.Fprintf(c.App.Writer, "%s: %d files, %d failed\n", name, len(files), failed)
	if failed > 0 {
		return withCode(exitFailure, fmt.Errorf("%s: %d of %d files failed", name, failed, len(files)))
	}
	return nil
}

// mountFiles returns the regular files named by args, directories walked,
// as paths relative to mount ("ns/dir/file"). Errors: a path outside the
// mount, or one that does not exist.
func mountFiles(mount string, args []string) ([]string, error) {
	mount = filepath.Clean(mount)
	var out []string
	for _, a := range args {
		p, err := filepath.Abs(a)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(mount, p)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, fmt.Errorf("%s is not on the mount %s", a, mount)
		}
		err = filepath.WalkDir(p, func(q string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.Type().IsRegular() {
				r, _ := filepath.Rel(mount, q)
				out = append(out, r)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
