package config

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

// ConfigFileFlag returns the --config flag (a fresh value on every call:
// urfave/cli records "set" state inside flag values).
func ConfigFileFlag() cli.Flag {
	return &cli.StringFlag{
		Name:        ConfigFlag,
		Usage:       fmt.Sprintf("YAML config file; a missing default file is ignored [$%s]", ConfigEnv),
		DefaultText: DefaultConfigFile,
	}
}

// Flags returns --config followed by one string flag per option of the
// table, for the `run` command. Flags carry no urfave EnvVars: FromCLI reads
// the environment itself so that precedence stays flag > env > file >
// default. Each call returns fresh flag values.
func Flags() []cli.Flag {
	fl := []cli.Flag{ConfigFileFlag()}
	for _, o := range table() {
		fl = append(fl, &cli.StringFlag{
			Name:        o.Flag,
			Usage:       fmt.Sprintf("%s [$%s]", o.Help, o.Env),
			DefaultText: o.Default,
		})
	}
	return fl
}

// FromCLI loads the configuration for a command whose flags include some or
// all of Flags(): the config file from --config, else $CTXMEM_CONFIG, else
// DefaultConfigFile (optional); the process environment; and every table
// flag that was set on the command line. Errors are those of Load.
func FromCLI(c *cli.Context) (Config, error) {
	in := Inputs{Env: os.LookupEnv, Flags: map[string]string{}}
	if c.IsSet(ConfigFlag) {
		in.File, in.FileExplicit = c.String(ConfigFlag), true
	} else if v, ok := os.LookupEnv(ConfigEnv); ok && v != "" {
		in.File, in.FileExplicit = v, true
	}
	for _, o := range table() {
		if c.IsSet(o.Flag) {
			in.Flags[o.Flag] = c.String(o.Flag)
		}
	}
	return Load(in)
}
