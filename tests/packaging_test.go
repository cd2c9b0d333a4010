package tests

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/config"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

// nfpmModule is the nfpm the Makefile's deb and rpm targets install.
const nfpmModule = "github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2"

// pkgVersion maps `git describe` output to a package version that semver,
// dpkg and rpm accept, as the Makefile does: a release tag (v1.2.3 or
// 1.2.3, with any -N-gHASH suffix) loses the v; anything else (no tag yet:
// a bare commit hash) becomes 0.0.0-git.<describe>.
func pkgVersion(describe string) string {
	if m := regexp.MustCompile(`^v?([0-9]+\.[0-9]+.*)$`).FindStringSubmatch(describe); m != nil {
		return m[1]
	}
	return "0.0.0-git." + describe
}

func TestPkgVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3": "1.2.3", "1.2.3-4-gabcdef0": "1.2.3-4-gabcdef0", "v0.1.0-dirty": "0.1.0-dirty",
		"10e8514": "0.0.0-git.10e8514", "10e8514-dirty": "0.0.0-git.10e8514-dirty", "abc1234": "0.0.0-git.abc1234",
	} {
		if got := pkgVersion(in); got != want {
			t.Errorf("pkgVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// needTool returns the path of a command the packaging test needs; it
// fails under CTXMEM_REQUIRE_TOOLS=1 and skips otherwise when missing.
func needTool(t *testing.T, name, hint string) string {
	t.Helper()
	return testenv.RequireTool(t, name, hint)
}

// sh runs a command with a deadline and returns its combined output and
// error (exit status or start failure).
func sh(t *testing.T, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// must is sh that fails the test on a non-zero exit.
func must(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := sh(t, dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// buildPackages builds the binary the way `make deb rpm` does and packs it
// with nfpm from packaging/nfpm.yaml; it returns the .deb, the .rpm and
// the version stamped into the binary.
func buildPackages(t *testing.T) (deb, rpm, version string) {
	t.Helper()
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	nfpm, err := exec.LookPath("nfpm")
	if err != nil {
		gobin := strings.TrimSpace(must(t, repo, nil, "go", "env", "GOPATH")) + "/bin"
		nfpm = filepath.Join(gobin, "nfpm")
		if !exists(nfpm) {
			t.Logf("go install %s", nfpmModule)
			must(t, repo, nil, "go", "install", nfpmModule)
		}
	}
	version = strings.TrimSpace(must(t, repo, nil, "git", "describe", "--tags", "--always", "--dirty"))
	// nfpm resolves the paths in nfpm.yaml against its working directory:
	// a scratch root with packaging/ linked in and its own bin/ctxmemd.
	root := t.TempDir()
	if err := os.Symlink(filepath.Join(repo, "packaging"), filepath.Join(root, "packaging")); err != nil {
		t.Fatal(err)
	}
	must(t, repo, []string{"CGO_ENABLED=0"}, "go", "build", "-buildmode=pie", "-trimpath",
		"-ldflags", "-s -w -X main.version="+version, "-o", filepath.Join(root, "bin", "ctxmemd"), "./cmd/ctxmemd")
	// The manual page, as `make man` makes it (nfpm.yaml packs build/ctxmemd.1.gz).
	page := must(t, repo, nil, filepath.Join(root, "bin", "ctxmemd"), "man")
	if err := os.MkdirAll(filepath.Join(root, "build"), 0o755); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	_, _ = zw.Write([]byte(page))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "build", "ctxmemd.1.gz"), gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	dist := filepath.Join(root, "dist")
	if err := os.Mkdir(dist, 0o755); err != nil { // nfpm -t needs an existing directory
		t.Fatal(err)
	}
	env := []string{"VERSION=" + pkgVersion(version)}
	for _, p := range []string{"deb", "rpm"} {
		t.Log(strings.TrimSpace(must(t, root, env, nfpm, "package", "-f", "packaging/nfpm.yaml", "-p", p, "-t", "dist/")))
	}
	debs, _ := filepath.Glob(filepath.Join(dist, "*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(dist, "*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("dist/ holds debs %v, rpms %v; want one of each", debs, rpms)
	}
	return debs[0], rpms[0], version
}

// TestPackaging builds the deb and rpm and checks them with the
// distributions' own tools: lintian, dpkg install/remove/purge, rpm
// queries and systemd-analyze verify on the installed units.
func TestPackaging(t *testing.T) {
	if os.Getenv(e2eEnv) != "1" {
		t.Skipf("packaging test: set %s=1 to run (needs root and dpkg)", e2eEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("packaging test needs root (dpkg -i)")
	}
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("packaging test needs dpkg")
	}
	lintian := needTool(t, "lintian", "apt-get install lintian")
	rpmBin := needTool(t, "rpm", "apt-get install rpm")
	analyze := needTool(t, "systemd-analyze", "apt-get install systemd")
	if _, err := sh(t, "", nil, "dpkg-query", "-W", "-f=${Status}", "fuse3"); err != nil {
		t.Fatal("the deb depends on fuse3: apt-get install fuse3")
	}
	if out, err := sh(t, "", nil, "dpkg-query", "-W", "-f=${Status}", "ctxmemd"); err == nil && strings.Contains(out, "installed") {
		t.Fatalf("a ctxmemd package is already installed (%s); this test would purge it: remove it first", out)
	}

	deb, rpm, version := buildPackages(t)

	t.Run("lintian", func(t *testing.T) {
		out, _ := sh(t, "", nil, lintian, deb) // exit 2 on warnings too: judge the E: lines
		t.Logf("lintian:\n%s", out)
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "E: ") {
				t.Errorf("lintian error: %s", l)
			}
		}
	})

	t.Run("rpm", func(t *testing.T) {
		info := must(t, "", nil, rpmBin, "-qip", rpm)
		for _, want := range []string{"Name        : ctxmemd", "Release     : 1", "License     : Apache-2.0"} {
			if !strings.Contains(info, want) {
				t.Errorf("rpm -qip lacks %q:\n%s", want, info)
			}
		}
		files := strings.Fields(must(t, "", nil, rpmBin, "-qlp", rpm))
		want := []string{"/etc/ctxmem/ctxmemd.yaml", "/usr/bin/ctxmemd",
			"/usr/lib/systemd/system/ctxmemd.service", "/usr/lib/systemd/system/ctxmemd-scheduler.service"}
		for _, w := range want {
			if !contains(files, w) {
				t.Errorf("rpm -qlp lacks %s: %v", w, files)
			}
		}
		if contains(files, "/lib/systemd/system/ctxmemd.service") || contains(files, "/usr/share/doc/ctxmemd/copyright") {
			t.Errorf("rpm carries deb-only files: %v", files)
		}
		flags := must(t, "", nil, rpmBin, "-qp", "--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]", rpm)
		if !strings.Contains(flags, "/etc/ctxmem/ctxmemd.yaml cn") {
			t.Errorf("ctxmemd.yaml is not %%config(noreplace) in the rpm:\n%s", flags)
		}
		if req := must(t, "", nil, rpmBin, "-qp", "--requires", rpm); !strings.Contains(req, "fuse3") {
			t.Errorf("rpm does not require fuse3:\n%s", req)
		}
		scripts := must(t, "", nil, rpmBin, "-qp", "--scripts", rpm)
		for _, w := range []string{"postinstall scriptlet", "systemctl --no-reload enable ctxmemd.service",
			"preuninstall scriptlet", "disable --now", "postuninstall scriptlet"} {
			if !strings.Contains(scripts, w) {
				t.Errorf("rpm scripts lack %q:\n%s", w, scripts)
			}
		}
	})

	t.Run("dpkg", func(t *testing.T) {
		t.Cleanup(func() {
			if out, err := sh(t, "", nil, "dpkg", "--purge", "ctxmemd"); err != nil {
				t.Logf("cleanup dpkg --purge: %v\n%s", err, out)
			}
		})
		if dep := must(t, "", nil, "dpkg-deb", "-f", deb, "Depends"); !strings.Contains(dep, "fuse3") {
			t.Errorf("deb Depends %q lacks fuse3", dep)
		}
		must(t, "", nil, "dpkg", "-i", deb)

		files := []string{"/usr/bin/ctxmemd", "/etc/ctxmem/ctxmemd.yaml",
			"/lib/systemd/system/ctxmemd.service", "/lib/systemd/system/ctxmemd-scheduler.service",
			"/usr/share/doc/ctxmemd/copyright", "/usr/share/doc/ctxmemd/changelog.Debian.gz"}
		for _, f := range files {
			if !exists(f) {
				t.Errorf("%s missing after dpkg -i", f)
			}
		}
		src, _ := os.ReadFile("../packaging/common/ctxmemd.yaml")
		if got, _ := os.ReadFile("/etc/ctxmem/ctxmemd.yaml"); !bytes.Equal(got, src) {
			t.Errorf("/etc/ctxmem/ctxmemd.yaml differs from packaging/common/ctxmemd.yaml")
		}
		if cf := must(t, "", nil, "dpkg-query", "-W", "-f=${Conffiles}", "ctxmemd"); !strings.Contains(cf, "/etc/ctxmem/ctxmemd.yaml") {
			t.Errorf("ctxmemd.yaml is not a conffile: %q", cf)
		}
		const wants = "/etc/systemd/system/multi-user.target.wants/"
		if !exists(wants + "ctxmemd.service") {
			t.Errorf("postinst did not enable ctxmemd.service")
		}
		if exists(wants + "ctxmemd-scheduler.service") {
			t.Errorf("postinst enabled the scheduler unit (it needs an external NATS: opt-in)")
		}
		if out := must(t, "", nil, "/usr/bin/ctxmemd", "version"); !strings.Contains(out, version) {
			t.Errorf("ctxmemd version printed %q, want %q in it", out, version)
		}
		// The installed config parses and points status at the state dir:
		// status then fails only because no daemon listens (exit 3, not 2).
		out, err := sh(t, "/", nil, "/usr/bin/ctxmemd", "status", "--config", "/etc/ctxmem/ctxmemd.yaml")
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || !strings.Contains(out, "/var/lib/ctxmem/admin.sock") {
			t.Errorf("ctxmemd status on the installed config: %v\n%s", err, out)
		}

		// systemd-analyze verify prints warnings yet exits 0: any output fails.
		units := []string{"/lib/systemd/system/ctxmemd.service", "/lib/systemd/system/ctxmemd-scheduler.service"}
		if out, err := sh(t, "/", nil, analyze, append([]string{"verify"}, units...)...); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}

		// An edited config survives reinstalling the package.
		edited := append(append([]byte{}, src...), []byte("log_level: debug\n")...)
		if err := os.WriteFile("/etc/ctxmem/ctxmemd.yaml", edited, 0o644); err != nil {
			t.Fatal(err)
		}
		must(t, "", []string{"DEBIAN_FRONTEND=noninteractive"}, "dpkg", "-i", deb)
		if got, _ := os.ReadFile("/etc/ctxmem/ctxmemd.yaml"); !bytes.Equal(got, edited) {
			t.Errorf("reinstalling overwrote the edited /etc/ctxmem/ctxmemd.yaml")
		}

		// State as the service would leave it (systemd makes StateDirectory).
		if err := os.MkdirAll("/var/lib/ctxmem/g3", 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("/var/lib/ctxmem/g3/seg-000000", []byte("x"), 0o640); err != nil {
			t.Fatal(err)
		}

		must(t, "", nil, "dpkg", "-r", "ctxmemd")
		for _, f := range files {
			if f != "/etc/ctxmem/ctxmemd.yaml" && exists(f) {
				t.Errorf("%s still there after dpkg -r", f)
			}
		}
		if !exists("/etc/ctxmem/ctxmemd.yaml") || !exists("/var/lib/ctxmem/g3/seg-000000") {
			t.Errorf("dpkg -r removed the config or the state; only purge may")
		}

		must(t, "", nil, "dpkg", "--purge", "ctxmemd")
		for _, f := range append(files, "/etc/ctxmem", "/var/lib/ctxmem", wants+"ctxmemd.service") {
			if exists(f) {
				t.Errorf("%s still there after dpkg --purge", f)
			}
		}
		if out, err := sh(t, "", nil, "dpkg-query", "-W", "-f=${Status}", "ctxmemd"); err == nil && strings.TrimSpace(out) != "" && !strings.Contains(out, "not-installed") {
			t.Errorf("dpkg still knows ctxmemd after purge: %q", out)
		}
	})
}

// TestPackagedConfigDocumentsEveryKey checks that /etc/ctxmem/ctxmemd.yaml
// as shipped documents every option key of ctxmemd run, and that with
// every example key uncommented it still loads (no unknown key, no bad
// value). It needs no root and always runs.
func TestPackagedConfigDocumentsEveryKey(t *testing.T) {
	raw, err := os.ReadFile("../packaging/common/ctxmemd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	keyRe := regexp.MustCompile("(?m)^\\| `([a-z0-9_]+)` \\|")
	keys := keyRe.FindAllStringSubmatch(config.MarkdownTable(), -1)
	if len(keys) < 10 {
		t.Fatalf("found only %d keys in config.MarkdownTable()", len(keys))
	}
	for _, k := range keys {
		key := k[1]
		doc := regexp.MustCompile(`(?m)^# ` + key + `: \S`)
		val := regexp.MustCompile(`(?m)^#?` + key + `:( |$)`)
		if !doc.MatchString(text) || !val.MatchString(text) {
			t.Errorf("key %s is not documented (# %s: ...) with a value line in the packaged config", key, key)
		}
	}
	all := regexp.MustCompile(`(?m)^#((?:  - |    )?[a-z_0-9]+:(?: |$))`).ReplaceAllString(text, "$1")
	path := filepath.Join(t.TempDir(), "all.yaml")
	if err := os.WriteFile(path, []byte(all), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"../packaging/common/ctxmemd.yaml", path} {
		cfg, err := config.Load(config.Inputs{File: f, FileExplicit: true})
		if err != nil {
			t.Errorf("%s does not load: %v", f, err)
			continue
		}
		if cfg.DataDir != "/var/lib/ctxmem" || cfg.Mount != "/run/ctxmem/mnt" {
			t.Errorf("%s: data_dir %q, mount %q; want /var/lib/ctxmem, /run/ctxmem/mnt", f, cfg.DataDir, cfg.Mount)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
