package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func runCLI(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	var got Config
	var lerr error
	app := &cli.App{Name: "x", Commands: []*cli.Command{{
		Name: "run", Flags: Flags(),
		Action: func(c *cli.Context) error { got, lerr = FromCLI(c); return nil },
	}}}
	if err := app.Run(append([]string{"x", "run"}, args...)); err != nil {
		t.Fatal(err)
	}
	return got, lerr
}

func TestFromCLI(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	file := writeFile(t, dir, "c.yaml", "dram: 2GiB\nblock_size: 1MiB\ng3_size: 1GiB\n")
	t.Setenv(ConfigEnv, file)
	t.Setenv("CTXMEM_BLOCK_SIZE", "64KiB")
	t.Setenv("CTXMEM_G3_SIZE", "2GiB")
	c, err := runCLI(t, "--g3-size", "3GiB", "--metrics", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.File != file || c.DRAM != 2<<30 || c.BlockSize != 64<<10 || c.G3Size != 3<<30 || c.Metrics != "" {
		t.Errorf("FromCLI: file %q dram %d block %d g3 %d metrics %q", c.File, c.DRAM, c.BlockSize, c.G3Size, c.Metrics)
	}
	if c.Source("metrics") != SourceFlag || c.Source("block_size") != SourceEnv || c.Source("dram") != SourceFile {
		t.Errorf("sources wrong: %v %v %v", c.Source("metrics"), c.Source("block_size"), c.Source("dram"))
	}
	// --config beats CTXMEM_CONFIG, and a missing named file is an error.
	if _, err := runCLI(t, "--config", filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing --config file: %v", err)
	}
	// A set-but-empty variable is a value (CTXMEM_METRICS="" disables
	// metrics), so an empty size is an error naming the variable.
	t.Setenv("CTXMEM_G3_SIZE", "")
	if _, err := runCLI(t); err == nil || !strings.Contains(err.Error(), "CTXMEM_G3_SIZE") {
		t.Errorf("empty CTXMEM_G3_SIZE: %v", err)
	}
	// Flags are fresh on each call (urfave keeps set-state in flag values):
	// g3_size now comes from the file, dram from the flag.
	t.Setenv(ConfigEnv, "/nonexistent/ignored-because-of-flag.yaml")
	os.Unsetenv("CTXMEM_G3_SIZE") // restored by t.Setenv's cleanup
	c, err = runCLI(t, "--config", file, "--dram", "512MiB")
	if err != nil || c.DRAM != 512<<20 || c.G3Size != 1<<30 || c.Source("g3_size") != SourceFile {
		t.Errorf("second run: dram %d g3 %d (%v) err %v", c.DRAM, c.G3Size, c.Source("g3_size"), err)
	}
}
