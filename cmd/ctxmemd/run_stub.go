package main

import (
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/ctxmem/ctxmemd/config"
)

// runDaemon is a placeholder until run.go wires the daemon; the lead
// deletes this file.
func runDaemon(c *cli.Context, cfg config.Config) error {
	_, _ = c, cfg
	return errors.New("run: not wired")
}
