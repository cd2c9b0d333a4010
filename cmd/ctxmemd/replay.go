package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/replay"
)

func replayCommand() *cli.Command {
	return &cli.Command{
		Name:      "replay",
		Usage:     "replay a request trace against a mount: read (and verify) existing blocks, write missing ones",
		ArgsUsage: " ",
		Description: "Trace: JSON lines {timestamp (ms), input_length, output_length, hash_ids}, plain or gzip-compressed; " +
			"without --trace, the Mooncake conversation trace built into the binary (12,031 requests). Each block of each " +
			"request is a file; a hit is read whole and checked against a pattern derived from its id, a miss is " +
			"written through a temp file and rename. Exit status 4 when any block fails verification.\n\n" +
			"Multi-host: give --mount once per host (each a different ctxmemd daemon's mount, same namespace layout). " +
			"Request i (in timestamp order, from 0) goes to host i mod N with --spread rr (default), or to host " +
			"hash(first K block ids) mod N with --spread hash --hash-blocks K (prefix-aware routing; K defaults to 1, but " +
			"every Mooncake request starts with block 0, so use K >= 2 there). Each host reads and writes only its " +
			"own mount: a block absent there is a miss there even if another host has it, unless a daemon shares it " +
			"(G3.5). Block bytes depend only on the block id, so a shared file verifies on every host. The result " +
			"adds one row per host.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "trace", Usage: "trace file (JSON lines, plain or gzip)",
				DefaultText: "the bundled Mooncake conversation trace"},
			&cli.StringSliceFlag{Name: "mount", Usage: "directory to replay into; repeat for a multi-host replay (one mount per host)",
				DefaultText: "the configured mount", KeepSpace: true},
			&cli.StringFlag{Name: "spread", Usage: "with several mounts, route request i to host i mod N (rr) or hash(first --hash-blocks block ids) mod N (hash)",
				Value: string(replay.SpreadRR)},
			&cli.IntFlag{Name: "hash-blocks", Usage: "--spread hash hashes the first N block ids (the Mooncake trace starts every request with block 0: use 2 or more)",
				Value: 1},
			&cli.DurationFlag{Name: "retry-missing", Usage: "on a miss, re-stat the file every 10ms for up to this long before writing it " +
				"(a block a peer shares meanwhile counts as a retry hit); 0 = off"},
			&cli.Float64Flag{Name: "speed", Usage: "time scale: 0 ignores timestamps, 1 real time, 10 ten times faster", Value: 0},
			&cli.IntFlag{Name: "requests", Usage: "replay only the first N requests (0 = all)"},
			&cli.IntFlag{Name: "concurrency", Usage: "requests in flight", Value: replay.DefaultConcurrency},
			&cli.StringFlag{Name: "block-bytes", Usage: "size of each block file (512KiB, 4096, ...)", Value: config.FormatSize(replay.DefaultBlockBytes)},
			&cli.StringFlag{Name: "layout", Usage: "file naming: flat, sglang, vllm, lmcache or nixl", Value: string(replay.LayoutFlat)},
			&cli.IntFlag{Name: "log-failures", Usage: "log details of the first N failures", Value: replay.DefaultFailureLogs},
			&cli.IntFlag{Name: "tokens-per-block", Usage: "tokens one block holds (for tokens not recomputed)", Value: replay.DefaultTokensPerBlock},
			&cli.Float64Flag{Name: "prefill-us-per-token", Usage: "the engine's prefill cost in µs per token (for the prefill time avoided; 0 = not shown)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as one JSON object"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress bar"},
		},
		Action: replayAction,
	}
}

func replayAction(c *cli.Context) error {
	layout, err := replay.ParseLayout(c.String("layout"))
	if err != nil {
		return withCode(exitUsage, err)
	}
	bb, err := config.ParseSize(c.String("block-bytes"))
	if err != nil || bb < 1 || bb > 1<<30 {
		return withCode(exitUsage, fmt.Errorf("--block-bytes %q: want a size from 1 B to 1 GiB (%v)", c.String("block-bytes"), err))
	}
	if c.Int("concurrency") < 1 || c.Float64("speed") < 0 || c.Int("requests") < 0 || c.Duration("retry-missing") < 0 ||
		c.Int("hash-blocks") < 1 || c.Int("tokens-per-block") < 1 || c.Float64("prefill-us-per-token") < 0 {
		return withCode(exitUsage, errors.New("--concurrency, --hash-blocks and --tokens-per-block must be >= 1; --speed, --requests, --retry-missing and --prefill-us-per-token >= 0"))
	}
	spread, err := replay.ParseSpread(c.String("spread"))
	if err != nil {
		return withCode(exitUsage, err)
	}
	mounts := c.StringSlice("mount")
	if len(mounts) == 0 || len(mounts) == 1 && mounts[0] == "" { // as the single --mount did: "" is the default
		cfg, err := config.FromCLI(c)
		if err != nil {
			return withCode(exitUsage, fmt.Errorf("no --mount given and the configuration does not load: %w", err))
		}
		mounts = []string{cfg.Mount}
	}
	reqs, err := replay.LoadTrace(c.String("trace"), c.Int("requests"))
	if err != nil {
		return withCode(exitUsage, err)
	}
	opts := replay.Options{
		Mounts: mounts, Spread: spread, HashBlocks: c.Int("hash-blocks"), RetryMissing: c.Duration("retry-missing"),
		Layout: layout, BlockBytes: int(bb), Concurrency: c.Int("concurrency"),
		TokensPerBlock: c.Int("tokens-per-block"), PrefillUsPerToken: c.Float64("prefill-us-per-token"),
		Speed: c.Float64("speed"), FailureLogs: max(c.Int("log-failures"), 1),
		Logger: slog.New(slog.NewTextHandler(c.App.ErrWriter, nil)),
	}
	if f, ok := c.App.ErrWriter.(*os.File); ok && !c.Bool("quiet") && term.IsTerminal(int(f.Fd())) {
		opts.Progress = f
	}
	res, runErr := replay.Run(c.Context, reqs, opts)
	if runErr != nil && res.Requests == 0 {
		if c.Context.Err() != nil {
			return withCode(exitInterrupted, runErr)
		}
		return withCode(exitUsage, runErr)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else if err := res.WriteTable(c.App.Writer); err != nil {
		return err
	}
	switch {
	case runErr != nil:
		return withCode(exitInterrupted, fmt.Errorf("replay interrupted after %d requests: %w", res.Requests, runErr))
	case res.VerifyFailures > 0:
		return withCode(exitVerify, fmt.Errorf("replay: %d verification failures", res.VerifyFailures))
	case res.WriteErrors > 0 || res.ReadErrors > 0:
		return withCode(exitWriteErrors, fmt.Errorf("replay: %d blocks could not be written, %d could not be read", res.WriteErrors, res.ReadErrors))
	}
	return nil
}
