// Command fakectxmemd stands in for ctxmemd in the harness's own tests and
// for dry runs of the end-to-end tests: `run` serves a go-fuse loopback of
// <data-dir>/fs (with a default/ namespace) on --mount, recovering a stale
// mount and refusing a busy one like ctxmemd; SIGTERM unmounts and exits 0;
// `status --json` asks the running fake over --admin for a ctxmemd-shaped
// status. Unknown flags are accepted and ignored.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fakectxmemd run|status [flags]")
		os.Exit(2)
	}
	flags := parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "run":
		err = run(flags)
	case "status":
		err = status(flags)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakectxmemd:", err)
		os.Exit(1)
	}
}

// parse reads --name value and --name=value pairs; bare flags map to "true".
func parse(args []string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := strings.TrimLeft(args[i], "-")
		if k, v, ok := strings.Cut(a, "="); ok {
			m[k] = v
		} else if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			m[a] = args[i+1]
			i++
		} else {
			m[a] = "true"
		}
	}
	return m
}

func run(f map[string]string) error {
	mnt, data, admin := f["mount"], f["data-dir"], f["admin"]
	if mnt == "" || data == "" || admin == "" {
		return errors.New("run needs --mount, --data-dir and --admin")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); errors.Is(err, unix.ENOTCONN) {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("recover stale mount %s: %w", mnt, err)
		}
	} else if busy, _ := mounted(mnt); busy {
		return fmt.Errorf("mount %s: mount point busy", mnt)
	}
	src := filepath.Join(data, "fs")
	if err := os.MkdirAll(filepath.Join(src, "default"), 0o755); err != nil {
		return err
	}
	root, err := fs.NewLoopbackRoot(src)
	if err != nil {
		return err
	}
	srv, err := fs.Mount(mnt, root, &fs.Options{MountOptions: fuse.MountOptions{FsName: "fakectxmemd", DirectMount: true}})
	if err != nil {
		return err
	}
	os.Remove(admin)
	ln, err := net.Listen("unix", admin)
	if err != nil {
		srv.Unmount()
		return err
	}
	go serveStatus(ln, mnt) // ends when ln is closed below
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { <-ctx.Done(); ln.Close(); srv.Unmount() }()
	srv.Wait()
	return nil
}

func mounted(dir string) (bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if fs := strings.Fields(l); len(fs) > 4 && fs[4] == dir {
			return true, nil
		}
	}
	return false, nil
}

// serveStatus answers each connection with one JSON status line.
func serveStatus(ln net.Listener, mnt string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		ents, _ := os.ReadDir(filepath.Join(mnt, "default"))
		fmt.Fprintf(c, `{"tiers":[{"name":"G2","used_bytes":0,"capacity_bytes":0,"blocks":%d},{"name":"G3","used_bytes":0,"capacity_bytes":0,"blocks":0}],"stats":{"objects":%d}}`+"\n", len(ents), len(ents))
		c.Close()
	}
}

func status(f map[string]string) error {
	c, err := net.Dial("unix", f["admin"])
	if err != nil {
		return err
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && err != io.EOF {
		return err
	}
	_, err = os.Stdout.WriteString(line)
	return err
}
