package g3

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ctxmem/ctxmemd/internal/testchild"
	"github.com/ctxmem/ctxmemd/tiering/tier"
	"github.com/ctxmem/ctxmemd/tiering/tiertest"
)

// Environment of the kill -9 child.
const (
	killDirEnv   = "G3_KILL_DIR"
	killStartEnv = "G3_KILL_START"
	// killBufferedEnv set: the child uses buffered I/O (odd rounds), where
	// a killed write can be cut short between pages.
	killBufferedEnv = "G3_KILL_BUFFERED"
	killWriters     = 3
	// killCapacity makes the child reclaim and reuse segment files.
	killCapacity = 12 * mib
)

// killKey and killLen derive block i's key and length; its bytes are
// tiertest.Pattern(killKey(i), killLen(i), 0).
func killKey(i int) tier.Key {
	return tier.Key{Namespace: "kill", Object: uint64(i / 16), Index: uint32(i % 16), Gen: 1}
}
func killLen(i int) int { return 1 + (i*7919)%(160*kib) }

// killChild is the child half of TestKill9 (role "kill", see TestMain):
// it writes blocks to the store in $G3_KILL_DIR from several goroutines
// forever, printing "put i" after each acknowledged Put, "deleting i"
// before a Delete, "del i" after it is acknowledged, and "evicting i"
// when reclaim is about to drop block i.
func killChild(testing.TB) {
	dir := os.Getenv(killDirEnv)
	start, _ := strconv.Atoi(os.Getenv(killStartEnv))
	var mu sync.Mutex
	say := func(format string, a ...any) {
		mu.Lock()
		fmt.Fprintf(os.Stdout, format, a...) // os.Stdout is unbuffered
		mu.Unlock()
	}
	noDirect := os.Getenv(killBufferedEnv) != ""
	s, err := Open(Options{Dir: dir, SegmentBytes: mib, CapacityBytes: killCapacity, NoDirect: noDirect, Logger: quietLogger(),
		OnEvict: func(keys []tier.Key) {
			for _, key := range keys {
				say("evicting %d\n", int(key.Object)*16+int(key.Index))
			}
		}})
	if err != nil {
		fmt.Println("open error:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range killWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := start + w; ; i += killWriters {
				if err := s.Put(ctx, killKey(i), tiertest.Pattern(killKey(i), killLen(i), 0)); err != nil {
					say("error %v\n", err)
					os.Exit(2)
				}
				say("put %d\n", i)
				if j := i - 2*killWriters; i%5 == 0 && j >= start {
					say("deleting %d\n", j)
					if err := s.Delete(ctx, killKey(j)); err != nil {
						say("error %v\n", err)
						os.Exit(2)
					}
					say("del %d\n", j)
				}
			}
		}()
	}
	wg.Wait()
}

// TestKill9 runs the child, kills it with SIGKILL mid-stream, reopens the
// store and checks that every acknowledged block reads back byte-exact,
// every acknowledged delete stuck, and nothing reads as wrong bytes.
// Several rounds, alternating O_DIRECT and buffered I/O, so recovered
// (repaired) segments get sealed and rescanned.
func TestKill9(t *testing.T) {
	dir := t.TempDir()
	acked := map[int]bool{}  // i → stored (true) / deleted (false)
	started := map[int]int{} // round in which i may have been written
	next := 0
	for round := range 4 {
		env := []string{killDirEnv + "=" + dir, killStartEnv + "=" + strconv.Itoa(next)}
		if round%2 == 1 {
			env = append(env, killBufferedEnv+"=1")
		}
		child := testchild.Start(t, "kill", env...)
		sc := bufio.NewScanner(child.Stdout)
		killAt := 150 + 80*round
		n, maxI, killed := 0, next, false
		for sc.Scan() {
			line := sc.Text()
			f := strings.Fields(line)
			if len(f) != 2 || (f[0] != "put" && f[0] != "del" && f[0] != "deleting" && f[0] != "evicting") {
				if !killed {
					t.Fatalf("child: %q", line)
				}
				continue // a line cut by the kill
			}
			i, err := strconv.Atoi(f[1])
			if err != nil {
				continue
			}
			switch f[0] {
			case "deleting", "evicting": // may or may not have happened
				delete(acked, i)
			default:
				acked[i] = f[0] == "put"
			}
			maxI = max(maxI, i)
			n++
			if n == killAt && !killed {
				child.Kill()
				killed = true
			}
		}
		err := child.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended with %v, want killed by SIGKILL", round, err)
		}
		for i := next; i <= maxI+killWriters*2; i++ {
			started[i] = round
		}
		next = maxI + killWriters*2 + 1
		checkKilled(t, dir, acked, started, round)
	}
}

// checkKilled reopens the store after a kill and verifies it.
func checkKilled(t *testing.T, dir string, acked map[int]bool, started map[int]int, round int) {
	t.Helper()
	s, err := Open(Options{Dir: dir, SegmentBytes: mib, CapacityBytes: killCapacity, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer s.Close()
	for i, stored := range acked {
		key := killKey(i)
		got, err := get(s, key, killLen(i)+1)
		if stored {
			if err != nil || string(got) != string(tiertest.Pattern(key, killLen(i), 0)) {
				t.Fatalf("round %d: acknowledged block %d: %d bytes, %v", round, i, len(got), err)
			}
		} else if !errors.Is(err, tier.ErrNotFound) {
			t.Fatalf("round %d: acknowledged delete of %d: Get = %v", round, i, err)
		}
	}
	// Whatever else is there (writes in flight at the kill) is exact.
	err = s.Range(context.Background(), func(key tier.Key, n int64) bool {
		i := int(key.Object)*16 + int(key.Index)
		if _, ok := started[i]; !ok || key.Namespace != "kill" || n != int64(killLen(i)) {
			t.Errorf("round %d: unexpected block %v (%d bytes)", round, key, n)
			return true
		}
		got, err := get(s, key, int(n))
		if err != nil || string(got) != string(tiertest.Pattern(key, int(n), 0)) {
			t.Errorf("round %d: block %v in flight at the kill reads %v", round, key, err)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.DamagedSegments != 0 || st.CRCErrors != 0 {
		t.Fatalf("round %d: %+v", round, st)
	}
	t.Logf("round %d: %d acked ops, %d blocks, %d segments, %d torn records", round, len(acked), s.Usage().Blocks, st.Segments, st.TornRecords)
}
