// Command ctxmemd is the KV-cache context-memory daemon and its tools.
//
//	ctxmemd run      mount the context-memory file system and serve (flags: see config)
//	ctxmemd status   show a running daemon's tiers and counters (admin socket)
//	ctxmemd replay   replay a request trace against a mount, verifying every byte
//	ctxmemd sim      simulate cache sizes and policies on a trace (no mount needed; table, JSON or CSV)
//	ctxmemd curve    hit ratio versus capacity (miss-ratio curve) of a daemon or a trace, as SVG or CSV
//	ctxmemd top      live rates per tier of a running daemon
//	ctxmemd bench    the KV-cache and fio jobs on any directory, beside a reference
//	ctxmemd ls|du    where files are, by tier
//	ctxmemd evict|sink|warmup|pin|unpin  move files between tiers by hand
//	ctxmemd fsck|gc  verify block copies (online, or --offline) and collect stray ones
//	ctxmemd nbd attach  attach an NBD export to a kernel /dev/nbdN
//	ctxmemd version  print the version
//
// Exit status:
//
//	0    success
//	1    failure at run time (daemon error, I/O error, daemon-reported error)
//	2    usage or configuration error (unknown command or flag, bad value, invalid config)
//	3    no daemon answers on the admin socket (status)
//	4    replay found verification failures (bytes read back were wrong, short or unreadable)
//	5    replay could not write some missing blocks (and found no verification failure)
//	130  interrupted (SIGINT/SIGTERM) before finishing
//
// The version is stamped at build time: go build -ldflags "-X main.version=v1.2.3".
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/ctxmem/ctxmemd/config"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes (see the package documentation).
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitNotRunning  = 3
	exitVerify      = 4
	exitWriteErrors = 5
	exitInterrupted = 130
)

// exitError carries an exit code through urfave/cli.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// ExitCode implements cli.ExitCoder.
func (e *exitError) ExitCode() int { return e.code }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	usageErr := false
	app := newApp(stdout, stderr, &usageErr)
	err := app.RunContext(ctx, args)
	switch {
	case err == nil && usageErr:
		return exitUsage
	case err == nil:
		return exitOK
	}
	fmt.Fprintf(stderr, "ctxmemd: %v\n", err)
	var ec cli.ExitCoder
	switch {
	case errors.As(err, &ec):
		return ec.ExitCode()
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return exitInterrupted
	case usageErr:
		return exitUsage
	}
	return exitFailure
}

// newApp builds the CLI. usageErr is set when urfave reports a usage
// problem (unknown command, bad flag).
func newApp(stdout, stderr io.Writer, usageErr *bool) *cli.App {
	onUsage := func(_ *cli.Context, err error, _ bool) error {
		*usageErr = true
		return withCode(exitUsage, err)
	}
	cmds := []*cli.Command{
		runCommand(),
		statusCommand(),
		replayCommand(),
		simCommand(),
		curveCommand(),
		nbdCommand(),
		schedulerCommand(),
		prestageCommand(),
		poolCommand(),
		benchCommand(),
		topCommand(),
		versionCommand(),
		manCommand(),
	}
	cmds = append(cmds, moveCommands()...)
	cmds = append(cmds, duCommands()...)
	cmds = append(cmds, fsckCommands()...)
	for _, c := range cmds {
		c.OnUsageError = onUsage
	}
	return &cli.App{
		Name:                 "ctxmemd",
		Usage:                "KV-cache context-memory daemon (G2 DRAM, G3 NVMe, G3.5 pool, G4 object storage)",
		Version:              version,
		Writer:               stdout,
		ErrWriter:            stderr,
		Commands:             cmds,
		EnableBashCompletion: true,
		// Keep policy specs such as "wtinylfu:window=0.01,protected=0.8"
		// whole in repeated --policy flags.
		DisableSliceFlagSeparator: true,
		OnUsageError:              onUsage,
		// Exit codes are decided by run, never inside urfave.
		ExitErrHandler: func(*cli.Context, error) {},
		CommandNotFound: func(c *cli.Context, name string) {
			*usageErr = true
			fmt.Fprintf(stderr, "ctxmemd: unknown command %q; see ctxmemd --help\n", name)
		},
		Description: "Exit status: 0 success; 1 run-time failure; 2 usage or configuration error; " +
			"3 no daemon on the admin socket; 4 replay verification failures; 5 replay write errors; 130 interrupted.",
	}
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "mount the context-memory file system and serve until SIGINT/SIGTERM",
		Description: "Options come from flags, CTXMEM_* environment variables, the YAML config file and built-in " +
			"defaults, in that order of precedence. With no configuration at all, the mount point and data directory " +
			"are ./" + config.DevRoot + "/mnt and ./" + config.DevRoot + "/data under the working directory.",
		Flags: config.Flags(),
		Action: func(c *cli.Context) error {
			cfg, err := config.FromCLI(c)
			if err != nil {
				return withCode(exitUsage, err)
			}
			return runDaemon(c, cfg)
		},
	}
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version",
		Action: func(c *cli.Context) error {
			_, err := fmt.Fprintf(c.App.Writer, "ctxmemd %s (%s %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

// manCommand prints the manual page (roff, section 1); `make man` and the
// packages use it.
func manCommand() *cli.Command {
	return &cli.Command{
		Name: "man", Usage: "print the manual page (roff)", Hidden: true,
		Action: func(c *cli.Context) error {
			page, err := c.App.ToManWithSection(1)
			if err == nil {
				_, err = io.WriteString(c.App.Writer, page)
			}
			return err
		},
	}
}
