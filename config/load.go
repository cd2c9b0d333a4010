package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Inputs are the layers Load merges. Every field may be zero.
type Inputs struct {
	// File is the YAML config file; "" means DefaultConfigFile.
	File string
	// FileExplicit says File was named by the user (flag or CTXMEM_CONFIG):
	// then a missing file is an error. A missing default file is skipped.
	FileExplicit bool
	// Env looks up an environment variable (os.LookupEnv in the daemon;
	// nil means no environment).
	Env func(name string) (string, bool)
	// Flags maps an option's flag name ("data-dir") to the value given on
	// the command line; only flags the user actually set belong here.
	Flags map[string]string
}

// Load merges defaults, the YAML file, the environment and the flags (in
// rising precedence), derives the dependent defaults (dirty_bytes,
// g3_dir, g4, admin), makes paths absolute against the working directory and
// validates the result. Errors name the option, the offending value and the
// layer it came from; validation problems are all reported at once
// (errors.Join).
func Load(in Inputs) (Config, error) {
	c := Config{given: map[string]givenAt{}}
	opts := table()
	for _, o := range opts {
		if o.derive != nil {
			continue
		}
		if err := o.set(&c, o.Default); err != nil {
			return Config{}, fmt.Errorf("config: built-in default of %s %q: %w", o.Key, o.Default, err)
		}
	}

	file := in.File
	if file == "" {
		file = DefaultConfigFile
	}
	data, err := os.ReadFile(file)
	switch {
	case err == nil:
		c.File = file
		if err := applyYAML(&c, file, data); err != nil {
			return Config{}, err
		}
	case errors.Is(err, fs.ErrNotExist) && !in.FileExplicit:
		// no config file: defaults, env and flags only
	default:
		return Config{}, fmt.Errorf("config: read config file: %w", err)
	}

	if in.Env != nil {
		for _, o := range opts {
			if v, ok := in.Env(o.Env); ok {
				if err := o.set(&c, v); err != nil {
					return Config{}, fmt.Errorf("config: %s: environment %s=%q: %w", o.Key, o.Env, v, err)
				}
				c.setGiven(o.Key, SourceEnv, fmt.Sprintf("environment %s=%q", o.Env, v))
			}
		}
	}

	for name, v := range in.Flags {
		o, ok := lookupFlag(opts, name)
		if !ok {
			return Config{}, fmt.Errorf("config: unknown flag --%s", name)
		}
		if err := o.set(&c, v); err != nil {
			return Config{}, fmt.Errorf("config: %s: flag --%s=%q: %w", o.Key, o.Flag, v, err)
		}
		c.setGiven(o.Key, SourceFlag, fmt.Sprintf("flag --%s=%q", o.Flag, v))
	}

	if err := c.finish(); err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func lookupFlag(opts []Option, name string) (Option, bool) {
	name = strings.TrimLeft(name, "-")
	for _, o := range opts {
		if o.Flag == name {
			return o, true
		}
	}
	return Option{}, false
}

// finish makes paths absolute and fills derived defaults.
func (c *Config) finish() error {
	var err error
	for _, p := range []*string{&c.Mount, &c.DataDir} {
		if *p, err = absPath(*p); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	for _, o := range table() {
		if o.derive == nil {
			continue
		}
		if o.get(c) == "" || o.get(c) == "0" {
			o.derive(c)
		}
	}
	for _, p := range []*string{&c.G3Dir, &c.Admin} {
		if *p, err = absPath(*p); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	if p, ok := c.G4Path(); ok {
		abs, err := absPath(p)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		c.G4 = "file://" + abs
	}
	for i := range c.Namespaces {
		if c.Namespaces[i].BlockSize == 0 {
			c.Namespaces[i].BlockSize = c.BlockSize
		}
	}
	return nil
}
