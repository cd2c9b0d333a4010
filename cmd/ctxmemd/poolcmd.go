package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/ctxmem/ctxmemd/config"
	"github.com/ctxmem/ctxmemd/fabric/pool"
)

func poolCommand() *cli.Command {
	return &cli.Command{
		Name:  "pool",
		Usage: "format or inspect a G3.5 shared pool device or file",
		Subcommands: []*cli.Command{
			{
				Name:      "format",
				Usage:     "write a new pool superblock (destroys a pool already there only with --force)",
				ArgsUsage: "DEVICE-OR-FILE",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "size", Usage: "bytes to use (a file is created or grown); default: the device size"},
					&cli.StringFlag{Name: "extent-size", Value: "64MiB", Usage: "extent size (power of two, at least 1MiB)"},
					&cli.BoolFlag{Name: "force", Usage: "format over an existing pool"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return withCode(exitUsage, errors.New("usage: ctxmemd pool format [--size S] [--extent-size E] DEVICE-OR-FILE"))
					}
					var size int64
					if v := c.String("size"); v != "" {
						n, err := config.ParseSize(v)
						if err != nil {
							return withCode(exitUsage, fmt.Errorf("--size: %w", err))
						}
						size = n
					}
					es, err := config.ParseSize(c.String("extent-size"))
					if err != nil {
						return withCode(exitUsage, fmt.Errorf("--extent-size: %w", err))
					}
					sb, err := pool.Format(c.Args().First(), pool.FormatOptions{Size: size, ExtentSize: es, Force: c.Bool("force")})
					if err != nil {
						return withCode(exitFailure, err)
					}
					fmt.Fprintf(c.App.Writer, "pool %s: %d extents of %s on %s\n", sb.UUID(), sb.ExtentCount,
						config.FormatSize(sb.ExtentSize), c.Args().First())
					return nil
				},
			},
			{
				Name:      "info",
				Usage:     "print a pool's superblock",
				ArgsUsage: "DEVICE-OR-FILE",
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return withCode(exitUsage, errors.New("usage: ctxmemd pool info DEVICE-OR-FILE"))
					}
					p, err := pool.Open(c.Args().First(), pool.OpenOptions{})
					if err != nil {
						return withCode(exitFailure, err)
					}
					defer p.Close()
					sb := p.Superblock()
					fmt.Fprintf(c.App.Writer, "pool %s\nformat version %d\nextents %d of %s\ndevice size %s\ncreated %s\nI/O %s\n",
						sb.UUID(), sb.Version, sb.ExtentCount, config.FormatSize(sb.ExtentSize),
						config.FormatSize(sb.DeviceSize), sb.Created.Format("2006-01-02T15:04:05Z07:00"), p.Mode())
					return nil
				},
			},
		},
	}
}
