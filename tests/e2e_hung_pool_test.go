package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2EHungPoolAtStart: `ctxmemd run --pool` on a pool device that
// hangs (a pool file on a freezableDevice, frozen) gives up opening it
// after --local-read-timeout, logs it at ERROR with the path, and exits 1
// with an error naming the device and the bound; a `status` sent while it
// starts says the daemon closed the connection without answering (still
// starting), not "connection reset by peer". Before, the daemon waited for
// the device forever, never mounted and logged nothing.
func TestE2EHungPoolAtStart(t *testing.T) {
	bin := needE2E(t)
	dev := startFreezableDevice(t, bin)
	poolPath := filepath.Join(dev.Namespace(), "pool.img")
	run(t, bin, "pool", "format", "--size", "32MiB", "--extent-size", "1MiB", poolPath)
	root, err := os.MkdirTemp("", "ctxm-hp-") // short: the admin socket path
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	for _, d := range []string{"mnt", "data"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sock, conf := filepath.Join(root, "admin.sock"), filepath.Join(root, "ctxmemd.yaml")
	if err := os.WriteFile(conf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", conf, "--mount", filepath.Join(root, "mnt"), "--data-dir", filepath.Join(root, "data"),
		"--admin", sock, "--metrics=", "--dram", "64MiB", "--g3-size", "0", "--g4", "none",
		"--pool", poolPath, "--local-read-timeout", "2s", "--host", "hung-pool-host")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	dev.freeze(t)
	defer dev.resume(t)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	// status while it starts: the socket is bound before the pool opens.
	statusOut := make(chan string, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		b, err := exec.Command(bin, "status", "--admin", sock).CombinedOutput()
		statusOut <- strings.TrimSpace(string(b)) + " (" + errString(err) + ")"
	}()
	var werr error
	select {
	case werr = <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("run with a hung pool device did not exit in 60 s (--local-read-timeout 2s)\n%s", out.String())
	}
	took := time.Since(start)
	log := out.String()
	t.Logf("run exited after %v: %v\n%s", took.Round(time.Millisecond), werr, tailString(log, 1500))
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() != 1 {
		t.Errorf("run with a hung pool: %v; want exit status 1", werr)
	}
	for _, want := range []string{"G3.5 pool does not answer", poolPath, "no answer within 2s"} {
		if !strings.Contains(log, want) {
			t.Errorf("run's output lacks %q", want)
		}
	}
	if took > 30*time.Second {
		t.Errorf("run with a hung pool exited after %v; want about 2 s", took)
	}
	st := <-statusOut
	t.Logf("status while starting: %s", st)
	if strings.Contains(st, "connection reset") && !strings.Contains(st, "without answering") || !strings.Contains(st, "exit status 3") {
		t.Errorf("status of a daemon starting on a hung pool: %s; want exit 3 saying it is not answering", st)
	}
}

func errString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
