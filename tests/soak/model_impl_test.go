package soak

import (
	"fmt"
	"sync"
)

// fileVer is one version of a file's content: fileImage(id, v, size).
type fileVer struct {
	v    uint64
	size int
}

// fileState is what the soak knows about one file of the namespace. mu
// is held by whichever worker uses the file (one writer or one reader at
// a time), and by nobody while the soak verifies.
type fileState struct {
	mu sync.Mutex
	id uint64
	// acked is the version a restart must show when nothing is pending:
	// written and fsync'd (fsync returned), or seen after a restart (what
	// a restart recovered is on disk), or closed before a graceful stop.
	// nil: no such version (the file may be absent).
	acked *fileVer
	// pending are versions started since acked and not acknowledged
	// (not fsync'd, or interrupted by the kill). After a kill the file may
	// hold acked, any one of these (or a clean prefix of it), or be gone.
	pending []fileVer
	// live is what the file holds now while the daemon runs (the last
	// version whose writer closed it); nil when absent or undetermined.
	live *fileVer
	// closed: live was closed normally (for a graceful stop, where every
	// closed file is written back).
	closed bool
}

// allowed returns the versions the file may hold after a kill.
func (f *fileState) allowed() []fileVer {
	out := append([]fileVer(nil), f.pending...)
	if f.acked != nil {
		out = append(out, *f.acked)
	}
	return out
}

// exportModel tracks, for every 4 KiB sector of the NBD export, which
// versions it may hold after a kill. Writers own disjoint sector ranges and
// serialize their requests, so for one sector the versions written form an
// increasing sequence and "acknowledged before a FLUSH that was
// acknowledged" is a prefix of it.
type exportModel struct {
	durable   []uint64   // newest version covered by an acknowledged FLUSH or FUA write (0: zeros)
	lastAcked []uint64   // newest version whose WRITE was acknowledged
	sent      [][]uint64 // versions sent since the last verification (ascending)
}

func newExportModel(sectors int) *exportModel {
	return &exportModel{durable: make([]uint64, sectors), lastAcked: make([]uint64, sectors), sent: make([][]uint64, sectors)}
}

// check says whether version v (0: zeros) is a legitimate content of
// sector s after a kill, and whether it is older than an acknowledged
// (but unflushed) write — a loss the contract allows.
func (m *exportModel) check(s int, v uint64) (ok, lostAllowed bool) {
	d := m.durable[s]
	if v == d {
		return true, m.lastAcked[s] > d
	}
	if v < d {
		return false, false
	}
	for _, x := range m.sent[s] {
		if x == v {
			return true, m.lastAcked[s] > v
		}
	}
	return false, false
}

func (m *exportModel) describe(s int) string {
	return fmt.Sprintf("durable version %d, last acknowledged %d, sent since last verification %v",
		m.durable[s], m.lastAcked[s], m.sent[s])
}

// settle records what a restart showed (observed[s]) as the new durable
// state (the soak flushes right after, so it is) — or, when nothing is
// durable (volatile), as one more version the sector may hold.
func (m *exportModel) settle(observed []uint64, volatile bool) {
	for s, v := range observed {
		m.durable[s], m.lastAcked[s], m.sent[s] = v, v, nil
		if volatile {
			m.durable[s] = 0
			if v != 0 {
				m.sent[s] = []uint64{v}
			}
		}
	}
}

// gracefulStop: a SIGTERM writes everything back, so every acknowledged
// write is durable.
func (m *exportModel) gracefulStop() {
	copy(m.durable, m.lastAcked)
}

// stats are the soak's counters.
type stats struct {
	Cycles          int
	Kills           map[string]int
	FilesChecked    int64
	FilesAcked      int64 // files whose acknowledged version read back exactly
	FilesNewer      int64 // files holding a complete unacknowledged version
	FilesLostAllow  int64 // files absent, but not acknowledged
	FilesTruncAllow int64 // files holding a clean prefix (or empty) of an unacknowledged version
	// acknowledged files gone after restart on a profile without G4, where
	// G3 reclaim drops files (counted in FilesLostAllow too)
	FilesAckedCapLost int64
	FilesEIOGone      int64 // read after restart got EIO, then the file was gone (counted as absent)
	TmpChecked        int64
	BytesVerified     int64 // every byte compared after restarts (files + export)
	AckedBytes        int64 // of which acknowledged bytes (file acked versions, durable sectors)
	SectorsChecked    int64
	SectorsDurable    int64 // at their durable version (written ones)
	SectorsNewer      int64 // at a newer, not yet flushed version
	SectorsLostOK     int64 // older than an acknowledged but unflushed write
	LiveReads         int64 // reads verified while the daemon ran (files + export read-backs)
	FilesWritten      int64
	FsyncsAcked       int64
	NBDWrites         int64
	NBDFlushes        int64
	BytesWritten      int64
	WrongBytes        int64
	MaxMountWait      string
}
