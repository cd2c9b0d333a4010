package catalog

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestWALFrames(t *testing.T) {
	ops := [][]walOp{
		{{kind: opPutNode, a: 7, val: []byte("rec")}, {kind: opPutDirent, a: 2, b: 7, name: "f"}},
		{{kind: opDelDirent, a: 2, name: "f"}, {kind: opDelNode, a: 7}},
		{{kind: opPutXattr, a: 9, name: "user.x", val: []byte{}}},
	}
	var log []byte
	for i, o := range ops {
		log = append(log, encodeFrame(uint64(i+1), o)...)
	}
	var got []uint64
	decodeFrames(log, func(seq uint64, o []walOp) {
		got = append(got, seq)
		if len(o) != len(ops[seq-1]) || o[0].kind != ops[seq-1][0].kind || o[0].name != ops[seq-1][0].name ||
			!bytes.Equal(o[0].val, ops[seq-1][0].val) {
			t.Errorf("frame %d: %+v", seq, o)
		}
	})
	if len(got) != 3 {
		t.Fatalf("decoded %v", got)
	}
	// A torn last frame and a corrupt one are where replay stops.
	for _, cut := range []int{len(log) - 1, len(log) - len(encodeFrame(3, ops[2])) + 5} {
		n := 0
		decodeFrames(log[:cut], func(uint64, []walOp) { n++ })
		if n != 2 {
			t.Errorf("cut at %d: %d frames, want 2", cut, n)
		}
	}
	bad := append([]byte(nil), log...)
	bad[len(bad)-1] ^= 1
	n := 0
	decodeFrames(bad, func(uint64, []walOp) { n++ })
	if n != 2 {
		t.Errorf("corrupt last frame: %d frames, want 2", n)
	}
}

// TestJournalRotateAndReplay logs changes through small log files, checks
// that committed files are deleted, and that a log left behind (as by a
// crash) is replayed into the database.
func TestJournalRotateAndReplay(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tree.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Commits happen only when forced (sync): kicks wait out the hour.
	j, err := db.OpenJournal(JournalConfig{Logger: testLogger(), Interval: time.Hour, Gap: time.Hour,
		NextIno: func() uint64 { return 1000 }})
	if err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	j.rotate = 512
	j.mu.Unlock()
	for i := 0; i < 200; i++ {
		n := &testNode{ino: uint64(100 + i), rec: Record{Kind: KindFile, Obj: 1}}
		if err := j.Apply(PutNode(n), PutDirent(5, "f"+string(rune('a'+i%26))+string(rune('0'+i/26)), n.ino)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	// Full files were rotated out and deleted once committed; at most
	// the current one is left.
	if files, _ := WALFiles(path); len(files) > 1 {
		t.Errorf("log files after commits: %v", files)
	}
	var applied []byte
	db.db.View(func(tx *bolt.Tx) error {
		applied = append(applied, tx.Bucket(bucketMeta).Get(keyAppliedSeq)...)
		return nil
	})
	if !bytes.Equal(applied, u64(200)) {
		t.Errorf("applied_seq %x, want 200", applied)
	}
	// Log a change the committer does not write, then stop without the
	// final bookkeeping, as a crash would.
	extra := &testNode{ino: 999, rec: Record{Kind: KindFile, Obj: 2}}
	if err := j.Apply(PutNode(extra), PutDirent(5, "late", extra.ino)); err != nil {
		t.Fatal(err)
	}
	var inDB bool
	db.db.View(func(tx *bolt.Tx) error {
		inDB = tx.Bucket(bucketDirents).Get(direntKey(5, "late")) != nil
		return nil
	})
	if inDB {
		t.Fatal("late change committed despite the gap")
	}
	seq, err := db.Replay(testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if seq != 201 {
		t.Errorf("replayed up to seq %d, want 201", seq)
	}
	db.db.View(func(tx *bolt.Tx) error {
		inDB = tx.Bucket(bucketDirents).Get(direntKey(5, "late")) != nil
		return nil
	})
	if !inDB {
		t.Fatal("logged change not replayed")
	}
	if files, _ := WALFiles(path); len(files) != 0 {
		t.Errorf("log files after replay: %v", files)
	}
	close(j.stop)
	<-j.done
}

// testNode is a fixed node record.
type testNode struct {
	ino uint64
	rec Record
}

func (n *testNode) Ino() uint64    { return n.ino }
func (n *testNode) Record() Record { return n.rec }

func testLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestAddNamespace: a namespace is recorded once, with its directory.
func TestAddNamespace(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "tree.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	id := Identity{ModelID: "m", BlockSize: 4096}
	root := &testNode{ino: 9, rec: Record{Kind: KindDir, Mode: 0o750}}
	if err := db.AddNamespace("a", id, root); err != nil {
		t.Fatal(err)
	}
	if err := db.AddNamespace("a", id, &testNode{ino: 10, rec: root.rec}); !errors.Is(err, ErrNamespaceRecorded) {
		t.Fatalf("second add: %v, want ErrNamespaceRecorded", err)
	}
	l, err := db.Load()
	if err != nil {
		t.Fatal(err)
	}
	if r := l.Namespaces["a"]; r.Ino != 9 || r.Identity != id || l.Nodes[9] != root.rec || len(l.Nodes) != 1 {
		t.Fatalf("recorded %+v, nodes %+v", r, l.Nodes)
	}
}
