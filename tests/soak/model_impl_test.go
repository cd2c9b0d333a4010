package soak

import (
	"fmt"
	"strings"
	"sync"
)

// fileVer is one version of a file's content: fileImage(id, v, size), or,
// when pages is not nil, one state of a truncate-and-rewrite run: page i
// holds page i of version pages[i], or zeros where pages[i] is 0 (a hole
// the truncate made), and size is len(pages) pages. v then names the
// state (the version of the operation that produced it).
type fileVer struct {
	v     uint64
	size  int
	pages []uint64
}

// page returns the version page i of fv holds (0: zeros).
func (fv fileVer) page(i int) uint64 {
	if fv.pages != nil {
		return fv.pages[i]
	}
	return fv.v
}

// image is the full content of fv for file id.
func (fv fileVer) image(id, seed uint64) []byte {
	if fv.pages == nil {
		return fileImage(id, fv.v, fv.size, seed)
	}
	b := make([]byte, fv.size)
	for i, pv := range fv.pages {
		if pv != 0 {
			fillPage(b[i*pageSize:(i+1)*pageSize], magicFile, id, pv, uint64(i), seed)
		}
	}
	return b
}

// String names fv: "version 7 (8192 bytes)", or the page map of a state.
func (fv fileVer) String() string {
	if fv.pages == nil {
		return fmt.Sprintf("version %d (%d bytes)", fv.v, fv.size)
	}
	return fmt.Sprintf("state %d (%d bytes: %s)", fv.v, fv.size, pageMap(fv.pages))
}

// pageMap is a compact page list: runs of one version as "a-b:v", zeros as
// "z", a page that is no version of the file (^0) as "bad".
func pageMap(pages []uint64) string {
	var b strings.Builder
	for i := 0; i < len(pages); {
		j := i
		for j+1 < len(pages) && pages[j+1] == pages[i] {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		val := "z"
		if pages[i] == ^uint64(0) {
			val = "bad"
		} else if pages[i] != 0 {
			val = fmt.Sprint(pages[i])
		}
		if i == j {
			fmt.Fprintf(&b, "%d:%s", i, val)
		} else {
			fmt.Fprintf(&b, "%d-%d:%s", i, j, val)
		}
		i = j + 1
	}
	if b.Len() == 0 {
		return "empty"
	}
	return b.String()
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
	// unlinking: an unlink of the file was sent and has not returned (or
	// the kill interrupted it): after a restart the file may also be
	// absent, whatever was acknowledged. Once unlink returns, the file has
	// no version at all (acked and pending nil) until it is recreated: it
	// must be absent after any restart.
	unlinking bool
	// unlinked: unlink returned and nothing was written since (so a
	// restart that shows the file is wrong; counted when it is absent).
	unlinked bool
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
//
// TRIM and WRITE_ZEROES (with or without NO_HOLE) are versions too, taken
// from the same counter, whose content is zeros: ctxmemd documents that a
// discarded range reads as zeros (tiering.Store.Discard frees whole blocks
// and zeroes partial ones in place; nbd/doc.go: "the range is discarded
// and reads as a hole"), so the model treats TRIM exactly like
// WRITE_ZEROES, not as the spec's "zeros or old data".
type exportModel struct {
	durable   []uint64   // newest version covered by an acknowledged FLUSH or FUA write (0: zeros, never written)
	lastAcked []uint64   // newest version whose WRITE (TRIM, WRITE_ZEROES) was acknowledged
	sent      [][]uint64 // versions sent since the last verification (ascending)
	seen      []uint64   // what the last verification found (for reports: the state before sent)
	zmu       sync.Mutex
	zero      map[uint64]string // versions that are TRIM or WRITE_ZEROES (content: zeros): which request
}

func newExportModel(sectors int) *exportModel {
	return &exportModel{durable: make([]uint64, sectors), lastAcked: make([]uint64, sectors), sent: make([][]uint64, sectors),
		seen: make([]uint64, sectors), zero: map[uint64]string{}}
}

// markZero records that version v writes zeros, and with which request
// (NBD writers run concurrently, so this one is locked).
func (m *exportModel) markZero(v uint64, req string) {
	m.zmu.Lock()
	m.zero[v] = req
	m.zmu.Unlock()
}

func (m *exportModel) isZero(v uint64) bool {
	return v == 0 || m.zeroReq(v) != ""
}

// zeroReq is the request that wrote zeros as version v ("" if none).
func (m *exportModel) zeroReq(v uint64) string {
	m.zmu.Lock()
	defer m.zmu.Unlock()
	return m.zero[v]
}

// holds: version x of a sector reads as what was found (zeros, or data
// version v).
func (m *exportModel) holds(x uint64, zero bool, v uint64) bool {
	if zero {
		return m.isZero(x)
	}
	return x == v && !m.isZero(x)
}

// check says whether what sector s holds after a kill (zeros, or data
// version v) is legitimate, which version of the sector's history it is
// (match; 0 for never written), and whether it is older than an
// acknowledged (but unflushed) write — a loss the contract allows.
func (m *exportModel) check(s int, zero bool, v uint64) (match uint64, ok, lostAllowed bool) {
	d := m.durable[s]
	if m.holds(d, zero, v) {
		return d, true, m.lastAcked[s] > d
	}
	if !zero && v < d {
		return 0, false, false
	}
	for _, x := range m.sent[s] { // ascending: the newest match wins
		if x > d && m.holds(x, zero, v) {
			match, ok = x, true
		}
	}
	return match, ok, ok && m.lastAcked[s] > match
}

// settle records what a restart showed (observed[s]) as the new durable
// state (the soak flushes right after, so it is) — or, when nothing is
// durable (volatile), as one more version the sector may hold.
func (m *exportModel) settle(observed []uint64, volatile bool) {
	for s, v := range observed {
		m.durable[s], m.lastAcked[s], m.sent[s], m.seen[s] = v, v, nil, v
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
	SectorsZeroed     int64 // zeros from a TRIM or WRITE_ZEROES (durable or newer)
	FilesTruncState   int64 // files found at a state of a truncate-and-rewrite run (counted in the above too)
	FilesUnlinkedGone int64 // files unlinked (not recreated) and absent, as they must be
	LiveReads         int64 // reads verified while the daemon ran (files + export read-backs)
	FilesWritten      int64
	FsyncsAcked       int64
	NBDWrites         int64
	NBDFlushes        int64
	BytesWritten      int64
	WrongBytes        int64
	MaxMountWait      string
}
