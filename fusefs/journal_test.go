package fusefs

import (
	"bytes"
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
	db, err := openTreeDB(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Commits happen only when forced (sync): kicks wait out the hour.
	j, err := openJournal(db, path, 0, testLogger(), time.Hour, time.Hour, func() uint64 { return 1000 })
	if err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	j.rotate = 512
	j.mu.Unlock()
	parent := &node{ino: 5, kind: kindDir}
	for i := 0; i < 200; i++ {
		n := &node{ino: uint64(100 + i), kind: kindFile, obj: 1}
		if err := j.apply(putNode(n), putDirent(parent, "f"+string(rune('a'+i%26))+string(rune('0'+i/26)), n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.sync(); err != nil {
		t.Fatal(err)
	}
	// Full files were rotated out and deleted once committed; at most
	// the current one is left.
	if files, _ := walFiles(path); len(files) > 1 {
		t.Errorf("log files after commits: %v", files)
	}
	var applied []byte
	db.View(func(tx *bolt.Tx) error {
		applied = append(applied, tx.Bucket(bucketMeta).Get(keyAppliedSeq)...)
		return nil
	})
	if !bytes.Equal(applied, u64(200)) {
		t.Errorf("applied_seq %x, want 200", applied)
	}
	// Log a change the committer does not write, then stop without the
	// final bookkeeping, as a crash would.
	extra := &node{ino: 999, kind: kindFile, obj: 2}
	if err := j.apply(putNode(extra), putDirent(parent, "late", extra)); err != nil {
		t.Fatal(err)
	}
	var inDB bool
	db.View(func(tx *bolt.Tx) error {
		inDB = tx.Bucket(bucketDirents).Get(direntKey(5, "late")) != nil
		return nil
	})
	if inDB {
		t.Fatal("late change committed despite the gap")
	}
	seq, err := replayWAL(db, path, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if seq != 201 {
		t.Errorf("replayed up to seq %d, want 201", seq)
	}
	db.View(func(tx *bolt.Tx) error {
		inDB = tx.Bucket(bucketDirents).Get(direntKey(5, "late")) != nil
		return nil
	})
	if !inDB {
		t.Fatal("logged change not replayed")
	}
	if files, _ := walFiles(path); len(files) != 0 {
		t.Errorf("log files after replay: %v", files)
	}
	close(j.stop)
	<-j.done
}
