package fusefs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The journal makes tree changes durable and copies them into the tree
// database.
//
// apply appends each change to a write-ahead log (TreePath.wal.<first
// seq>, one write(2) per change, no fsync) and returns: the change then
// survives kill -9 of the daemon (it is in the OS page cache) but not a
// power failure, and costs no disk flush. A committer goroutine copies
// queued changes into the bbolt database in batches, at most every
// DefaultCommitGap, and records the last sequence number applied (meta
// "applied_seq") in the same transaction; log files whose records are all
// applied are deleted once the log passes walRotateBytes. When the
// database is opened, records past applied_seq are replayed.
//
// Attribute-only changes (touch: the mtime of a write, utimensat) are not
// logged; they reach the database with the next batch or within the commit
// interval.
//
// Log framing: payload length (u32) ‖ CRC32C of payload (u32) ‖ payload,
// little-endian; payload = seq (u64) ‖ op count (u16) ‖ ops, each op =
// kind (u8) ‖ a (u64) ‖ b (u64) ‖ name length (u16) ‖ name ‖ value length
// (u32) ‖ value. Replay stops at the first torn or corrupt frame of a file.

const (
	walRotateBytes = 4 << 20
	// DefaultCommitGap is the least time between two commits of logged
	// changes to the database.
	DefaultCommitGap = 2 * time.Millisecond
	walSuffix        = ".wal."
)

var (
	keyAppliedSeq = []byte("applied_seq")
	castagnoli    = crc32.MakeTable(crc32.Castagnoli)
)

// walOp is a logged op in replayable form.
type walOp struct {
	kind opKind
	a, b uint64 // ino or parent ino; child ino
	name string
	val  []byte
}

func (o op) wal(rec []byte) walOp {
	switch o.kind {
	case opPutNode, opDelNode:
		return walOp{kind: o.kind, a: o.n.ino, val: rec}
	}
	return walOp{kind: o.kind, a: o.parent, b: o.child, name: o.name, val: o.value}
}

func encodeFrame(seq uint64, ops []walOp) []byte {
	n := 8 + 2
	for _, o := range ops {
		n += 1 + 8 + 8 + 2 + len(o.name) + 4 + len(o.val)
	}
	b := make([]byte, 8, 8+n)
	le := binary.LittleEndian
	b = le.AppendUint64(b, seq)
	b = le.AppendUint16(b, uint16(len(ops)))
	for _, o := range ops {
		b = append(b, byte(o.kind))
		b = le.AppendUint64(b, o.a)
		b = le.AppendUint64(b, o.b)
		b = le.AppendUint16(b, uint16(len(o.name)))
		b = append(b, o.name...)
		b = le.AppendUint32(b, uint32(len(o.val)))
		b = append(b, o.val...)
	}
	le.PutUint32(b[0:], uint32(len(b)-8))
	le.PutUint32(b[4:], crc32.Checksum(b[8:], castagnoli))
	return b
}

var errFrame = errors.New("torn or corrupt log frame")

// decodeFrames parses the frames of one log file, stopping at the first
// bad one.
func decodeFrames(data []byte, fn func(seq uint64, ops []walOp)) {
	le := binary.LittleEndian
	for len(data) >= 8 {
		n := int(le.Uint32(data))
		if n < 10 || len(data) < 8+n || crc32.Checksum(data[8:8+n], castagnoli) != le.Uint32(data[4:]) {
			return
		}
		ops, seq, err := decodePayload(data[8 : 8+n])
		if err != nil {
			return
		}
		fn(seq, ops)
		data = data[8+n:]
	}
}

func decodePayload(p []byte) ([]walOp, uint64, error) {
	le := binary.LittleEndian
	seq := le.Uint64(p)
	cnt := int(le.Uint16(p[8:]))
	p = p[10:]
	// Every op takes at least 19 bytes: the declared count is trusted only
	// as far as the payload can hold it.
	ops := make([]walOp, 0, min(cnt, len(p)/19))
	for i := 0; i < cnt; i++ {
		if len(p) < 19 {
			return nil, 0, errFrame
		}
		o := walOp{kind: opKind(p[0]), a: le.Uint64(p[1:]), b: le.Uint64(p[9:])}
		nl := int(le.Uint16(p[17:]))
		p = p[19:]
		if len(p) < nl+4 {
			return nil, 0, errFrame
		}
		o.name = string(p[:nl])
		vl := int(le.Uint32(p[nl:]))
		p = p[nl+4:]
		if len(p) < vl {
			return nil, 0, errFrame
		}
		o.val = append([]byte(nil), p[:vl]...)
		p = p[vl:]
		ops = append(ops, o)
	}
	if len(p) != 0 {
		// The encoder writes nothing after the ops: bytes there mean the
		// frame is not one of ours.
		return nil, 0, errFrame
	}
	return ops, seq, nil
}

// walFiles lists the log files of the database at base, oldest first.
func walFiles(base string) ([]string, error) {
	files, err := filepath.Glob(base + walSuffix + "*")
	sort.Strings(files) // names end in a zero-padded first seq
	return files, err
}

// replayWAL applies the logged changes past the database's applied_seq,
// deletes the log files, and returns the last sequence number.
func replayWAL(db *bolt.DB, base string, log *slog.Logger) (uint64, error) {
	var applied uint64
	if err := db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keyAppliedSeq); len(v) == 8 {
			applied = binary.BigEndian.Uint64(v)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	files, err := walFiles(base)
	if err != nil {
		return 0, err
	}
	last := applied
	var todo [][]walOp
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		decodeFrames(data, func(seq uint64, ops []walOp) {
			if seq > applied {
				todo = append(todo, ops)
			}
			last = max(last, seq)
		})
	}
	err = db.Update(func(tx *bolt.Tx) error {
		nb, db, xb := tx.Bucket(bucketNodes), tx.Bucket(bucketDirents), tx.Bucket(bucketXattrs)
		for _, ops := range todo {
			for _, o := range ops {
				var err error
				switch o.kind {
				case opPutNode:
					err = nb.Put(u64(o.a), o.val)
				case opDelNode:
					if err = nb.Delete(u64(o.a)); err == nil {
						err = deletePrefix(xb, u64(o.a))
					}
				case opPutDirent:
					err = db.Put(direntKey(o.a, o.name), u64(o.b))
				case opDelDirent:
					err = db.Delete(direntKey(o.a, o.name))
				case opPutXattr:
					err = xb.Put(direntKey(o.a, o.name), o.val)
				case opDelXattr:
					err = xb.Delete(direntKey(o.a, o.name))
				default:
					err = fmt.Errorf("unknown op %d", o.kind)
				}
				if err != nil {
					return err
				}
			}
		}
		return tx.Bucket(bucketMeta).Put(keyAppliedSeq, u64(last))
	})
	if err != nil {
		return 0, fmt.Errorf("replay tree log: %w", err)
	}
	if err := db.Sync(); err != nil {
		return 0, err
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			return 0, err
		}
	}
	if len(todo) > 0 {
		log.Info("fusefs: replayed tree log", "changes", len(todo), "last_seq", last)
	}
	return last, nil
}

type retiredWAL struct {
	path string
	last uint64 // last seq it holds
}

// journal: see the comment at the top of this file.
type journal struct {
	db       *bolt.DB
	base     string
	log      *slog.Logger
	interval time.Duration // attribute-only changes
	gap      time.Duration // logged changes
	rotate   int64         // log size (bytes) that starts a new file
	nextIno  func() uint64

	kick   chan struct{}
	urgent chan struct{}
	stop   chan struct{}
	done   chan struct{}

	mu        sync.Mutex
	cond      sync.Cond
	wal       *os.File
	walSize   int64
	retired   []retiredWAL
	nodes     map[*node]bool // true: put, false: delete
	dirents   map[dkey]uint64
	xattrs    map[xkey][]byte // nil value: delete
	seq       uint64          // last seq handed out
	committed uint64          // last seq in the database
	failed    uint64          // last seq whose commit failed
	failErr   error
}

// openJournal starts the journal after replayWAL returned seq.
func openJournal(db *bolt.DB, base string, seq uint64, log *slog.Logger, interval, gap time.Duration, nextIno func() uint64) (*journal, error) {
	j := &journal{
		db: db, base: base, log: log, interval: interval, gap: gap, rotate: walRotateBytes, nextIno: nextIno,
		kick: make(chan struct{}, 1), urgent: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
		nodes: map[*node]bool{}, dirents: map[dkey]uint64{}, xattrs: map[xkey][]byte{},
		seq: seq, committed: seq,
	}
	j.cond.L = &j.mu
	if err := j.openWAL(); err != nil {
		return nil, err
	}
	go j.run()
	return j, nil
}

// openWAL starts a new log file for the records after j.seq; j.mu held.
func (j *journal) openWAL() error {
	f, err := os.OpenFile(fmt.Sprintf("%s%s%020d", j.base, walSuffix, j.seq+1), os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("fusefs: open tree log: %w", err)
	}
	j.wal, j.walSize = f, 0
	return nil
}

// retireWAL closes the current log file; it is deleted once every record
// in it is in the database. j.mu held.
func (j *journal) retireWAL() {
	if j.wal == nil {
		return
	}
	j.retired = append(j.retired, retiredWAL{j.wal.Name(), j.seq})
	j.wal.Close()
	j.wal = nil
}

// apply logs ops as one atomic change and queues them for the database.
// It returns an error only if the change could be made durable neither
// in the log nor in the database.
func (j *journal) apply(ops ...op) error {
	wops := make([]walOp, len(ops))
	for i, o := range ops {
		var rec []byte
		if o.kind == opPutNode {
			rec = encodeNode(o.n)
		}
		wops[i] = o.wal(rec)
	}
	j.mu.Lock()
	j.seq++
	seq := j.seq
	var err error
	if j.wal == nil {
		err = j.openWAL()
	}
	if err == nil {
		frame := encodeFrame(seq, wops)
		if _, err = j.wal.Write(frame); err == nil {
			j.walSize += int64(len(frame))
		} else {
			j.retireWAL() // a torn frame ends that file
		}
	}
	for _, o := range ops {
		j.queue(o)
	}
	j.mu.Unlock()
	if err == nil {
		select {
		case j.kick <- struct{}{}:
		default:
		}
		return nil
	}
	j.log.Error("fusefs: tree log write failed; waiting for the database instead", "err", err)
	return j.wait(seq, true)
}

// queue adds o to the changes for the next commit; j.mu held.
func (j *journal) queue(o op) {
	switch o.kind {
	case opPutNode:
		j.nodes[o.n] = true
	case opDelNode:
		j.nodes[o.n] = false
		for k := range j.xattrs {
			if k.ino == o.n.ino {
				delete(j.xattrs, k)
			}
		}
	case opPutDirent:
		j.dirents[dkey{o.parent, o.name}] = o.child
	case opDelDirent:
		j.dirents[dkey{o.parent, o.name}] = 0
	case opPutXattr:
		j.xattrs[xkey{o.parent, o.name}] = o.value
	case opDelXattr:
		j.xattrs[xkey{o.parent, o.name}] = nil
	}
}

// touch queues a rewrite of n's record without logging it.
func (j *journal) touch(n *node) {
	j.mu.Lock()
	if _, ok := j.nodes[n]; !ok {
		j.nodes[n] = true
	}
	j.mu.Unlock()
}

// wait blocks until seq is in the database, committing at once if urgent.
func (j *journal) wait(seq uint64, urgent bool) error {
	if urgent {
		select {
		case j.urgent <- struct{}{}:
		default:
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.committed < seq && j.failed < seq {
		j.cond.Wait()
	}
	if j.committed < seq {
		return j.failErr
	}
	return nil
}

// sync writes everything queued so far, attribute changes included, to the
// database and fdatasyncs it: the tree then survives a power failure.
func (j *journal) sync() error {
	j.mu.Lock()
	if j.committed == j.seq && (len(j.nodes) > 0 || len(j.dirents) > 0 || len(j.xattrs) > 0) {
		j.seq++ // only unlogged touches are queued: make wait commit them
	}
	seq := j.seq
	j.mu.Unlock()
	if err := j.wait(seq, true); err != nil {
		return err
	}
	return j.db.Sync()
}

// close commits what is queued, stops the committer, removes the log and
// records the next inode number (commits do not: after a crash the
// largest recorded inode number is enough, since node ids need only be
// unique within one mount).
func (j *journal) close() {
	close(j.stop)
	<-j.done
	j.mu.Lock()
	defer j.mu.Unlock()
	clean := j.committed == j.seq
	j.retireWAL()
	next := j.nextIno()
	if err := j.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyNextIno, u64(next))
	}); err != nil {
		j.log.Error("fusefs: record next inode number", "err", err)
	}
	if err := j.db.Sync(); err != nil {
		j.log.Error("fusefs: sync tree database", "err", err)
		clean = false
	}
	if clean {
		for _, r := range j.retired {
			os.Remove(r.path)
		}
	}
}

func (j *journal) run() {
	defer close(j.done)
	tick := time.NewTicker(j.interval)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-j.urgent:
		case <-j.kick:
			// Batch: at most one commit per gap.
			if gap := j.gap - time.Since(last); gap > 0 {
				t := time.NewTimer(gap)
				select {
				case <-t.C:
				case <-j.urgent:
				case <-j.stop:
				}
				t.Stop()
			}
		case <-tick.C:
		case <-j.stop:
			j.commit()
			return
		}
		j.commit()
		last = time.Now()
	}
}

// commit writes everything queued in one transaction.
func (j *journal) commit() {
	j.mu.Lock()
	if len(j.nodes) == 0 && len(j.dirents) == 0 && len(j.xattrs) == 0 {
		j.committed = j.seq
		j.cond.Broadcast()
		j.mu.Unlock()
		return
	}
	nodes, dirents, xattrs := j.nodes, j.dirents, j.xattrs
	j.nodes, j.dirents, j.xattrs = map[*node]bool{}, map[dkey]uint64{}, map[xkey][]byte{}
	seq := j.seq
	if j.walSize > j.rotate {
		j.retireWAL()
	}
	j.mu.Unlock()

	// Keys are written in ascending order: bbolt splits nodes only at
	// commit, so random-order inserts into one big transaction would
	// cost a memmove of the whole leaf each.
	recs := make([]kv, 0, len(nodes))
	for n, put := range nodes {
		var v []byte
		if put {
			v = encodeNode(n)
		}
		recs = append(recs, kv{u64(n.ino), v})
	}
	dents := make([]kv, 0, len(dirents))
	for k, child := range dirents {
		var v []byte
		if child != 0 {
			v = u64(child)
		}
		dents = append(dents, kv{direntKey(k.parent, k.name), v})
	}
	xs := make([]kv, 0, len(xattrs))
	for k, v := range xattrs {
		xs = append(xs, kv{direntKey(k.ino, k.name), v})
	}
	err := j.db.Update(func(tx *bolt.Tx) error {
		xb := tx.Bucket(bucketXattrs)
		if err := putSorted(tx.Bucket(bucketNodes), recs, func(k []byte) error { return deletePrefix(xb, k) }); err != nil {
			return err
		}
		if err := putSorted(tx.Bucket(bucketDirents), dents, nil); err != nil {
			return err
		}
		if err := putSorted(xb, xs, nil); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keyAppliedSeq, u64(seq))
	})

	j.mu.Lock()
	defer j.mu.Unlock()
	if err != nil {
		j.log.Error("fusefs: tree database commit failed; changes stay queued", "err", err)
		// Queue the batch again unless newer changes superseded it.
		for n, put := range nodes {
			if _, ok := j.nodes[n]; !ok {
				j.nodes[n] = put
			}
		}
		for k, v := range dirents {
			if _, ok := j.dirents[k]; !ok {
				j.dirents[k] = v
			}
		}
		for k, v := range xattrs {
			if _, ok := j.xattrs[k]; !ok {
				j.xattrs[k] = v
			}
		}
		j.failed, j.failErr = seq, err
		j.cond.Broadcast()
		return
	}
	j.committed = max(j.committed, seq)
	keep := j.retired[:0]
	for _, r := range j.retired {
		if r.last <= seq {
			os.Remove(r.path)
		} else {
			keep = append(keep, r)
		}
	}
	j.retired = keep
	j.cond.Broadcast()
}
