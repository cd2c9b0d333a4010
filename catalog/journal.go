package catalog

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
// Apply appends each change to a write-ahead log (path.wal.<first seq>,
// one write(2) per change, no fsync) and returns: the change then
// survives kill -9 of the daemon (it is in the OS page cache) but not a
// power failure, and costs no disk flush. A committer goroutine copies
// queued changes into the bbolt database in batches, at most every
// JournalConfig.Gap, and records the last sequence number applied (meta
// "applied_seq") in the same transaction; log files whose records are all
// applied are deleted once the log passes walRotateBytes. When the
// database is opened, DB.Replay applies the records past applied_seq.
//
// Attribute-only changes (Touch: the mtime of a write, utimensat) are not
// logged; they reach the database with the next batch or within
// JournalConfig.Interval.
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

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// walOp is a logged op in replayable form.
type walOp struct {
	kind opKind
	a, b uint64 // ino or parent ino; child ino
	name string
	val  []byte
}

func (o Op) wal() walOp {
	switch o.kind {
	case opPutNode:
		return walOp{kind: o.kind, a: o.ino, val: o.n.Record().Encode()}
	case opDelNode:
		return walOp{kind: o.kind, a: o.ino}
	}
	return walOp{kind: o.kind, a: o.ino, b: o.child, name: o.name, val: o.value}
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

// WALFiles lists the write-ahead log files of the tree database at path,
// oldest first.
func WALFiles(path string) ([]string, error) {
	files, err := filepath.Glob(path + walSuffix + "*")
	sort.Strings(files) // names end in a zero-padded first seq
	return files, err
}

// Replay applies the logged changes past the database's applied_seq,
// fdatasyncs the database, deletes the log files, and returns the last
// sequence number (to give to OpenJournal).
func (d *DB) Replay(log *slog.Logger) (uint64, error) {
	var applied uint64
	if err := d.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keyAppliedSeq); len(v) == 8 {
			applied = binary.BigEndian.Uint64(v)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	files, err := WALFiles(d.path)
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
	err = d.db.Update(func(tx *bolt.Tx) error {
		nb, db, xb := tx.Bucket(bucketNodes), tx.Bucket(bucketDirents), tx.Bucket(bucketXattrs)
		nb.FillPercent = appendFill
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
	if err := d.db.Sync(); err != nil {
		return 0, err
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			return 0, err
		}
	}
	if len(todo) > 0 {
		log.Info("catalog: replayed tree log", "changes", len(todo), "last_seq", last)
	}
	return last, nil
}

type retiredWAL struct {
	path string
	last uint64 // last seq it holds
}

// JournalConfig configures OpenJournal.
type JournalConfig struct {
	// Seq is the last sequence number DB.Replay returned.
	Seq uint64
	// Logger receives commit failures.
	Logger *slog.Logger
	// Interval is the longest time an attribute-only change (Touch) waits
	// for a commit (> 0).
	Interval time.Duration
	// Gap is the least time between two commits of logged changes (> 0;
	// DefaultCommitGap is the mount's).
	Gap time.Duration
	// NextIno returns the next inode number to hand out; Close records it.
	NextIno func() uint64
}

// Journal is the write-ahead log of a DB and its committer goroutine (see
// the comment at the top of journal.go). Its methods are safe for
// concurrent use; the goroutine runs from OpenJournal to Close.
type Journal struct {
	db     *DB
	log    *slog.Logger
	cfg    JournalConfig
	rotate int64 // log size (bytes) that starts a new file
	kick   chan struct{}
	urgent chan struct{}
	stop   chan struct{}
	done   chan struct{}

	mu        sync.Mutex
	cond      sync.Cond
	wal       *os.File
	walSize   int64
	retired   []retiredWAL
	q         *batch
	seq       uint64 // last seq handed out
	committed uint64 // last seq in the database
	failed    uint64 // last seq whose commit failed
	failErr   error
}

// OpenJournal starts the journal of d after DB.Replay: it opens a new log
// file and starts the committer. Errors: the log file cannot be created.
func (d *DB) OpenJournal(cfg JournalConfig) (*Journal, error) {
	j := &Journal{
		db: d, log: cfg.Logger, cfg: cfg, rotate: walRotateBytes,
		kick: make(chan struct{}, 1), urgent: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
		q: newBatch(), seq: cfg.Seq, committed: cfg.Seq,
	}
	j.cond.L = &j.mu
	if err := j.openWAL(); err != nil {
		return nil, err
	}
	go j.run()
	return j, nil
}

// openWAL starts a new log file for the records after j.seq; j.mu held.
func (j *Journal) openWAL() error {
	f, err := os.OpenFile(fmt.Sprintf("%s%s%020d", j.db.path, walSuffix, j.seq+1), os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("catalog: open tree log: %w", err)
	}
	j.wal, j.walSize = f, 0
	return nil
}

// retireWAL closes the current log file; it is deleted once every record
// in it is in the database. j.mu held.
func (j *Journal) retireWAL() {
	if j.wal == nil {
		return
	}
	j.retired = append(j.retired, retiredWAL{j.wal.Name(), j.seq})
	j.wal.Close()
	j.wal = nil
}

// Apply logs ops as one atomic change and queues them for the database.
// It returns an error only if the change could be made durable neither
// in the log nor in the database. Only the node, dirent and xattr ops may
// be journaled (PutNamespace and SetNextIno are DB.Write's).
func (j *Journal) Apply(ops ...Op) error {
	wops := make([]walOp, len(ops))
	for i, o := range ops {
		if o.kind > opDelXattr {
			return fmt.Errorf("catalog: op %d cannot be journaled", o.kind)
		}
		wops[i] = o.wal()
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
		j.q.add(o)
	}
	j.mu.Unlock()
	if err == nil {
		select {
		case j.kick <- struct{}{}:
		default:
		}
		return nil
	}
	j.log.Error("catalog: tree log write failed; waiting for the database instead", "err", err)
	return j.wait(seq, true)
}

// Touch queues a rewrite of n's record without logging it.
func (j *Journal) Touch(n Node) {
	j.mu.Lock()
	if _, ok := j.q.nodes[n.Ino()]; !ok {
		j.q.nodes[n.Ino()] = n
	}
	j.mu.Unlock()
}

// wait blocks until seq is in the database, committing at once if urgent.
func (j *Journal) wait(seq uint64, urgent bool) error {
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

// Sync writes everything queued so far, attribute changes included, to
// the database and fdatasyncs it: the tree then survives a power failure.
// Errors: the commit or the fdatasync failed (the changes stay queued).
func (j *Journal) Sync() error {
	j.mu.Lock()
	if j.committed == j.seq && !j.q.empty() {
		j.seq++ // only unlogged touches are queued: make wait commit them
	}
	seq := j.seq
	j.mu.Unlock()
	if err := j.wait(seq, true); err != nil {
		return err
	}
	return j.db.Sync()
}

// Close commits what is queued, stops the committer, removes the log and
// records the next inode number (commits do not: after a crash the
// largest recorded inode number is enough, since node ids need only be
// unique within one mount). The DB stays open.
func (j *Journal) Close() {
	close(j.stop)
	<-j.done
	j.mu.Lock()
	defer j.mu.Unlock()
	clean := j.committed == j.seq
	j.retireWAL()
	if err := j.db.Write(SetNextIno(j.cfg.NextIno())); err != nil {
		j.log.Error("catalog: record next inode number", "err", err)
	}
	if err := j.db.Sync(); err != nil {
		j.log.Error("catalog: sync tree database", "err", err)
		clean = false
	}
	if clean {
		for _, r := range j.retired {
			os.Remove(r.path)
		}
	}
}

func (j *Journal) run() {
	defer close(j.done)
	tick := time.NewTicker(j.cfg.Interval)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-j.urgent:
		case <-j.kick:
			// Batch: at most one commit per gap.
			if gap := j.cfg.Gap - time.Since(last); gap > 0 {
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
func (j *Journal) commit() {
	j.mu.Lock()
	if j.q.empty() {
		j.committed = j.seq
		j.cond.Broadcast()
		j.mu.Unlock()
		return
	}
	b := j.q
	j.q = newBatch()
	b.seq = j.seq
	if j.walSize > j.rotate {
		j.retireWAL()
	}
	j.mu.Unlock()

	err := j.db.db.Update(b.write)

	j.mu.Lock()
	defer j.mu.Unlock()
	if err != nil {
		j.log.Error("catalog: tree database commit failed; changes stay queued", "err", err)
		// Queue the batch again unless newer changes superseded it.
		j.q.requeue(b)
		j.failed, j.failErr = b.seq, err
		j.cond.Broadcast()
		return
	}
	j.committed = max(j.committed, b.seq)
	keep := j.retired[:0]
	for _, r := range j.retired {
		if r.last <= b.seq {
			os.Remove(r.path)
		} else {
			keep = append(keep, r)
		}
	}
	j.retired = keep
	j.cond.Broadcast()
}
