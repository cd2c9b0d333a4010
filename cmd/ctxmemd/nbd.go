package main

import (
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/ctxmem/ctxmemd/nbd"
)

// nbdCommand groups NBD client helpers.
func nbdCommand() *cli.Command {
	return &cli.Command{
		Name:  "nbd",
		Usage: "NBD client helpers",
		Subcommands: []*cli.Command{{
			Name:      "attach",
			Usage:     "attach an export of a running ctxmemd to a kernel /dev/nbdN (needs the nbd kernel module); blocks until detached",
			ArgsUsage: "EXPORT /dev/nbdN",
			Flags: []cli.Flag{&cli.StringFlag{Name: "socket", Usage: "the daemon's NBD listener: a unix socket path or host:port",
				Required: true}},
			Action: func(c *cli.Context) error {
				if c.NArg() != 2 {
					return withCode(exitUsage, errors.New("nbd attach: want EXPORT and DEVICE"))
				}
				if err := nbd.Attach(c.Context, c.String("socket"), c.Args().Get(0), c.Args().Get(1)); err != nil {
					return withCode(exitFailure, err)
				}
				return nil
			},
		}},
	}
}
