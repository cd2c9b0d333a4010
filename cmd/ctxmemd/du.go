package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/config"
)

// tierOrder is the column order of ls and du.
var tierOrder = []string{"G2", "G3", "G3.5", "G4", "hole"}

// fileTiers is where one file's bytes are, by tier name.
type fileTiers struct {
	Path   string           `json:"path"`
	Files  int              `json:"files"`
	Size   int64            `json:"size_bytes"`
	Bytes  map[string]int64 `json:"bytes"`  // by tier
	Blocks map[string]int64 `json:"blocks"` // by tier
	Runs   string           `json:"tiers,omitempty"`
}

func (a *fileTiers) add(b fileTiers) {
	a.Files += b.Files
	a.Size += b.Size
	for k, v := range b.Bytes {
		a.Bytes[k] += v
	}
	for k, v := range b.Blocks {
		a.Blocks[k] += v
	}
}

func newFileTiers(path string) fileTiers {
	return fileTiers{Path: path, Bytes: map[string]int64{}, Blocks: map[string]int64{}}
}

// tiersOf reads the user.ctxmem.tier attribute of the regular file at p
// (runs like "G2*3 G4") and splits its size by tier, the block size
// being st_blksize (the namespace block size on a ctxmemd mount).
func tiersOf(p string) (fileTiers, error) {
	ft := newFileTiers(p)
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return ft, err
	}
	buf := make([]byte, 4096)
	var n int
	for {
		var err error
		n, err = unix.Getxattr(p, "user.ctxmem.tier", buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 4*len(buf))
			continue
		}
		if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP) {
			return ft, fmt.Errorf("%s: not on a ctxmemd mount (no user.ctxmem.tier)", p)
		}
		if err != nil {
			return ft, &fs.PathError{Op: "getxattr user.ctxmem.tier", Path: p, Err: err}
		}
		break
	}
	ft.Files, ft.Size, ft.Runs = 1, st.Size, string(buf[:n])
	bs := max(int64(st.Blksize), 1)
	var idx int64
	for _, run := range strings.Fields(ft.Runs) {
		name, count, found := strings.Cut(run, "*")
		c := int64(1)
		if found {
			v, err := strconv.ParseInt(count, 10, 64)
			if err != nil || v < 1 {
				return ft, fmt.Errorf("%s: bad user.ctxmem.tier run %q", p, run)
			}
			c = v
		}
		for range c {
			ft.Blocks[name]++
			ft.Bytes[name] += max(min(bs, st.Size-idx*bs), 0)
			idx++
		}
	}
	return ft, nil
}

// duCommands returns ls and du: where files are, by tier, read from the
// mount's user.ctxmem.tier attributes (no daemon socket needed).
func duCommands() []*cli.Command {
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print JSON"}
	return []*cli.Command{{
		Name:      "ls",
		Usage:     "list files on the mount with where their blocks are (tier runs, bytes per tier)",
		ArgsUsage: "PATH...",
		Flags:     []cli.Flag{jsonFlag},
		Action:    func(c *cli.Context) error { return runDu(c, true) },
	}, {
		Name:      "du",
		Usage:     "sum files and directories on the mount by tier: bytes and blocks in G2, G3, G3.5, G4 and holes",
		ArgsUsage: "PATH...",
		Flags:     []cli.Flag{jsonFlag},
		Action:    func(c *cli.Context) error { return runDu(c, false) },
	}}
}

func runDu(c *cli.Context, each bool) error {
	args := c.Args().Slice()
	if len(args) == 0 {
		args = []string{"."}
	}
	var rows []fileTiers
	// A path that fails is reported after the others are listed (as ls(1)
	// and du(1) do): missing ones make it a usage error, others a failure.
	var errs []error
	code := exitUsage
	for _, a := range args {
		total := newFileTiers(a)
		err := filepath.WalkDir(a, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			ft, err := tiersOf(p)
			if err != nil {
				return err
			}
			if each {
				rows = append(rows, ft)
			}
			total.add(ft)
			return nil
		})
		if err != nil {
			if !errors.Is(err, syscall.ENOENT) {
				code = exitFailure
			}
			errs = append(errs, err)
			continue
		}
		if !each {
			rows = append(rows, total)
		}
	}
	done := func(err error) error {
		if err == nil && len(errs) > 0 {
			return withCode(code, errors.Join(errs...))
		}
		return err
	}
	if c.Bool("json") {
		return done(printJSON(c.App.Writer, rows))
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
	head := "PATH\tFILES\tSIZE"
	if each {
		head = "PATH\tSIZE\tTIERS"
	}
	for _, t := range tierOrder {
		head += "\t" + t
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		line := fmt.Sprintf("%s\t%d\t%s", r.Path, r.Files, config.HumanSize(r.Size))
		if each {
			line = fmt.Sprintf("%s\t%s\t%s", r.Path, config.HumanSize(r.Size), r.Runs)
		}
		for _, t := range tierOrder {
			line += "\t" + config.HumanSize(r.Bytes[t])
		}
		fmt.Fprintln(tw, line)
	}
	return done(tw.Flush())
}
