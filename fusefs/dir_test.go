package fusefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxmem/ctxmemd/internal/testenv"
)

func TestRootReadOnly(t *testing.T) {
	m := mount(t, nil, Options{})
	if err := os.Mkdir(filepath.Join(m.mnt, "newns"), 0o755); !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EACCES) {
		t.Fatalf("mkdir at root: %v, want EPERM or EACCES", err)
	}
	if err := os.WriteFile(filepath.Join(m.mnt, "f"), nil, 0o644); !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EACCES) {
		t.Fatalf("create at root: %v", err)
	}
	if err := os.Remove(m.ns("")); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("rmdir of a namespace: %v, want EPERM", err)
	}
	if err := os.Chmod(m.mnt, 0o777); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("chmod of the root: %v, want EPERM", err)
	}
	ents, err := os.ReadDir(m.mnt)
	if err != nil || len(ents) != 1 || ents[0].Name() != DefaultNamespace || !ents[0].IsDir() {
		t.Fatalf("root listing: %v %v", ents, err)
	}
	st, err := os.Stat(m.ns(""))
	if err != nil || st.Mode().Perm() != 0o777 || st.Mode()&os.ModeSticky == 0 {
		t.Fatalf("default namespace mode: %v %v", st.Mode(), err)
	}
}

func TestMkdirRmdir(t *testing.T) {
	m := mount(t, nil, Options{})
	base := m.ns("")
	// mkdir -p races between threads (W3).
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				p := filepath.Join(base, "r0", fmt.Sprintf("%03x", i%4), fmt.Sprintf("%02x_g0", i%3))
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Errorf("MkdirAll: %v", err)
				}
				if err := os.WriteFile(filepath.Join(p, fmt.Sprintf("f%d-%d", g, i)), []byte("x"), 0o644); err != nil {
					t.Error(err)
				}
			}
		}(g)
	}
	wg.Wait()
	n := 0
	filepath.Walk(filepath.Join(base, "r0"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n++
		}
		return err
	})
	if n != 160 {
		t.Fatalf("files after concurrent mkdir -p: %d, want 160", n)
	}
	if err := os.Mkdir(filepath.Join(base, "r0"), 0o755); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("mkdir existing: %v", err)
	}
	if err := syscall.Rmdir(filepath.Join(base, "r0")); err != syscall.ENOTEMPTY {
		t.Fatalf("rmdir non-empty: %v, want ENOTEMPTY", err)
	}
	if err := os.RemoveAll(filepath.Join(base, "r0")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "r0")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after RemoveAll: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return m.be.count() == 0 }, "objects deleted")
	var st syscall.Stat_t
	syscall.Stat(base, &st)
	if st.Nlink != 2 {
		t.Errorf("namespace nlink %d, want 2", st.Nlink)
	}
	// The mount root: 2 plus one per namespace, from the mount on (it
	// was 0 until a namespace was added live).
	if err := syscall.Stat(m.mnt, &st); err != nil || st.Nlink != 3 {
		t.Errorf("mount root nlink %d (%v), want 3 (one namespace)", st.Nlink, err)
	}
}

// asUser runs fn on a thread whose fsuid/fsgid are uid/gid (the
// credentials FUSE and default_permissions check). The thread is thrown
// away afterwards.
func asUser(t *testing.T, uid, gid int, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		unix.Setfsgid(gid)
		unix.Setfsuid(uid)
		fn()
	}()
	<-done
}

func TestPermissions(t *testing.T) {
	m := mount(t, nil, Options{Namespaces: []Namespace{
		{Name: "private", UID: 0, GID: 0, Mode: 0o700},
		{Name: "alice", UID: 1000, GID: 1000, Mode: 0o700},
		{Name: "shared", Mode: 0o1777},
	}})
	// t.TempDir's directories are 0700; let other users reach the mount.
	for d := m.mnt; d != "/tmp" && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	priv := filepath.Join(m.mnt, "private")
	if err := os.WriteFile(filepath.Join(priv, "f"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	syscall.Stat(filepath.Join(m.mnt, "alice"), &st)
	if st.Uid != 1000 || st.Gid != 1000 || st.Mode&0o7777 != 0o700 {
		t.Fatalf("namespace alice: uid %d gid %d mode %o", st.Uid, st.Gid, st.Mode)
	}
	asUser(t, 1000, 1000, func() {
		if _, err := os.ReadDir(m.mnt); err != nil {
			t.Errorf("uid 1000 listing the mount root: %v", err)
		}
		if _, err := os.ReadFile(filepath.Join(priv, "f")); !errors.Is(err, syscall.EACCES) {
			t.Errorf("uid 1000 reading root's private namespace: %v, want EACCES", err)
		}
		if _, err := os.ReadDir(priv); !errors.Is(err, syscall.EACCES) {
			t.Errorf("uid 1000 listing root's private namespace: %v, want EACCES", err)
		}
		if err := os.WriteFile(filepath.Join(m.mnt, "alice", "mine"), []byte("a"), 0o600); err != nil {
			t.Errorf("uid 1000 creating in its namespace: %v", err)
		}
		if err := os.WriteFile(filepath.Join(m.mnt, "shared", "hers"), []byte("a"), 0o644); err != nil {
			t.Errorf("uid 1000 creating in the shared namespace: %v", err)
		}
	})
	syscall.Stat(filepath.Join(m.mnt, "alice", "mine"), &st)
	if st.Uid != 1000 || st.Gid != 1000 || st.Mode&0o777 != 0o600 {
		t.Errorf("file made by uid 1000: uid %d gid %d mode %o", st.Uid, st.Gid, st.Mode)
	}
	asUser(t, 2000, 2000, func() {
		if _, err := os.Stat(filepath.Join(m.mnt, "alice", "mine")); !errors.Is(err, syscall.EACCES) {
			t.Errorf("uid 2000 in alice's namespace: %v, want EACCES", err)
		}
		if err := os.Remove(filepath.Join(m.mnt, "shared", "hers")); !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EACCES) {
			t.Errorf("uid 2000 deleting another user's file in a sticky namespace: %v", err)
		}
		if err := os.Mkdir(filepath.Join(m.mnt, "x"), 0o755); !errors.Is(err, syscall.EACCES) {
			t.Errorf("uid 2000 mkdir at root: %v, want EACCES", err)
		}
	})
}

// TestReaddirLargeConcurrent lists a directory of 100,000 files while
// other goroutines create, rename and unlink files in it: every file that
// exists throughout appears exactly once in every listing, no name
// appears twice, and once the changes stop a listing is exact.
func TestReaddirLargeConcurrent(t *testing.T) {
	n, nplus := 100_000, 30_000
	if raceEnabled {
		n, nplus = 20_000, 5_000
	}
	t.Run("auto", func(t *testing.T) { testReaddirLarge(t, false, n, 3) })
	// Every entry through READDIRPLUS (each one also looked up, as for
	// ls -l); fewer entries keep the test short.
	t.Run("plus", func(t *testing.T) { testReaddirLarge(t, true, nplus, 2) })
}

func testReaddirLarge(t *testing.T, plus bool, stable, rounds int) {
	m := mount(t, nil, Options{readdirPlusAlways: plus})
	dir := filepath.Join(m.ns(""), "big")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dn := &dirNode{fsys: m.srv.fsys, n: m.node(dir)}
	t0 := time.Now()
	for i := 0; i < stable; i++ {
		if _, e := dn.newFile(context.Background(), fmt.Sprintf("s-%06d", i), 0o644); e != 0 {
			t.Fatal(e)
		}
	}
	t.Logf("populated in %v", time.Since(t0))

	var stop atomic.Bool
	var mu sync.Mutex
	live := map[string]bool{} // mutated names alive at the end
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				name := fmt.Sprintf("m-%d-%d", g, i)
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Error(err)
					return
				}
				switch i % 3 {
				case 0:
					if err := os.Remove(p); err != nil {
						t.Error(err)
						return
					}
				case 1:
					r := fmt.Sprintf("r-%d-%d", g, i)
					if err := os.Rename(p, filepath.Join(dir, r)); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					live[r] = true
					mu.Unlock()
				default:
					mu.Lock()
					live[name] = true
					mu.Unlock()
				}
			}
		}(g)
	}

	check := func(names []string, final bool) {
		t.Helper()
		seen := make(map[string]bool, len(names))
		nStable := 0
		for _, n := range names {
			if seen[n] {
				t.Fatalf("%q listed twice", n)
			}
			seen[n] = true
			switch {
			case strings.HasPrefix(n, "s-"):
				nStable++
			case strings.HasPrefix(n, "m-"), strings.HasPrefix(n, "r-"):
			default:
				t.Fatalf("unexpected name %q", n)
			}
		}
		if nStable != stable {
			t.Fatalf("listing has %d of the %d stable files", nStable, stable)
		}
		if final {
			if len(names) != stable+len(live) {
				t.Fatalf("final listing: %d names, want %d", len(names), stable+len(live))
			}
			for n := range live {
				if !seen[n] {
					t.Fatalf("final listing misses %q", n)
				}
			}
		}
	}
	listings := 0
	for listings < rounds {
		t0 := time.Now()
		f, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		check(names, false)
		t.Logf("listing in %v", time.Since(t0))
		listings++
	}
	stop.Store(true)
	wg.Wait()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	check(names, true)
	t0 = time.Now()
	m.restart()
	t.Logf("remount in %v", time.Since(t0))
	names2, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(names2) != len(names) {
		t.Fatalf("after remount: %d entries, want %d", len(names2), len(names))
	}
	t.Logf("%d listings under mutation, %d mutated names alive", listings, len(live))
}
