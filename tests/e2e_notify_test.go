package tests

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tests/harness"
)

// TestE2ESystemdNotify runs the daemon with a NOTIFY_SOCKET the test owns
// (as systemd's Type=notify would) and checks READY=1 arrives only once the
// mount is usable, then STATUS= with the tier summary and WATCHDOG=1 pings.
func TestE2ESystemdNotify(t *testing.T) {
	bin := needE2E(t)
	sockPath := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sockPath)
	t.Setenv("WATCHDOG_USEC", "1000000") // ping every 0.5 s
	d := harness.Start(t, bin, harness.Options{DRAM: "64MiB", G3Size: "256MiB"})

	var ready, status, watchdog bool
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 4096)
	for time.Now().Before(deadline) && !(ready && status && watchdog) {
		conn.SetReadDeadline(time.Now().Add(time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			switch {
			case line == "READY=1":
				// The mount must be usable when READY=1 is sent.
				if _, err := os.Stat(d.Namespace()); err != nil {
					t.Fatalf("READY=1 before the mount is usable: %v", err)
				}
				ready = true
			case strings.HasPrefix(line, "STATUS=serving ") && strings.Contains(line, "G2 "):
				status = true
			case line == "WATCHDOG=1":
				if !ready {
					t.Fatal("WATCHDOG=1 before READY=1")
				}
				watchdog = true
			}
		}
	}
	if !ready || !status || !watchdog {
		t.Fatalf("notify messages seen: READY=%v STATUS=%v WATCHDOG=%v", ready, status, watchdog)
	}
	d.Stop()
}
