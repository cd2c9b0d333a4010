package soak

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// verify checks, after a start, every file of the namespace and every
// sector of the export against the model, then makes what it saw the new
// baseline (flushing the export so it is durable).
func (s *soak) verify() {
	s.verifyFiles()
	if !s.noNBD {
		s.verifyExport()
	}
}

func (s *soak) verifyFiles() {
	ns := s.d.Namespace()
	var names []string
	if err := s.timed("readdir "+ns, opTimeout, func() error {
		ents, err := os.ReadDir(ns)
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return err
	}); err != nil {
		s.fail("MOUNT", fmt.Sprintf("readdir %s after restart: %v", ns, err))
	}
	byID := map[uint64]*fileState{}
	for _, f := range s.files {
		byID[f.id] = f
	}
	// Temp files of the rename writers: whatever survived must be a version
	// (or a clean prefix of one) that was pending for its file; then they go.
	for _, n := range names {
		if strings.HasPrefix(n, "f") {
			if id, err := strconv.ParseUint(n[1:], 10, 64); err == nil && byID[id] != nil {
				continue
			}
		}
		var id, v uint64
		if _, err := fmt.Sscanf(n, "t%d.%d", &id, &v); err != nil || byID[id] == nil {
			s.fail("WRONG BYTES", fmt.Sprintf("unexpected name %q in the namespace after restart", n))
		}
		f := byID[id]
		var want *fileVer
		for _, c := range f.pending {
			if c.v == v {
				want = &c
			}
		}
		p := filepath.Join(ns, n)
		got := s.readFile(p)
		if got == nil {
			continue
		}
		if want == nil {
			s.fail("WRONG BYTES", fmt.Sprintf("temp file %s of version %d, which was never pending for file %d", n, v, id))
		}
		s.checkPrefix(f, *want, got, p)
		s.st.TmpChecked++
		if err := s.timed("unlink "+p, opTimeout, func() error { return os.Remove(p) }); err != nil {
			s.fail("I/O ERROR", fmt.Sprintf("unlink %s: %v", p, err))
		}
	}
	for _, f := range s.files {
		s.verifyFile(f)
	}
}

// readFile reads p whole with a bound; nil when it does not exist.
func (s *soak) readFile(p string) []byte {
	var got []byte
	err := s.timed("read "+p, opTimeout, func() error {
		var err error
		got, err = os.ReadFile(p)
		return err
	})
	if errors.Is(err, syscall.EIO) {
		// Documented: the read that finds a file's block gone from every
		// tier gets EIO and the file is removed (later lookups ENOENT).
		// The name goes on the daemon's notifier goroutine (kernel
		// notifications must not run inside a request), so allow it a
		// moment.
		var st syscall.Stat_t
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if e := s.timed("stat "+p, opTimeout, func() error { return syscall.Stat(p, &st) }); errors.Is(e, syscall.ENOENT) {
				s.st.FilesEIOGone++
				return nil
			}
			if time.Now().After(deadline) {
				break
			}
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		s.fail("I/O ERROR", fmt.Sprintf("read %s after restart: %v (a lost file must be ENOENT, not an error at read)", p, err))
	}
	if got == nil {
		got = []byte{}
	}
	return got
}

// checkPrefix: got must be the first len(got) bytes of version want.
func (s *soak) checkPrefix(f *fileState, want fileVer, got []byte, p string) {
	if len(got) > want.size {
		s.wrong(fmt.Sprintf("%s: %d bytes, but version %d has %d", p, len(got), want.v, want.size))
	}
	img := fileImage(f.id, want.v, want.size, s.seed)
	if i := firstDiff(got, img[:len(got)]); i >= 0 {
		s.wrong(describeDiff(p, got, img[:len(got)], i, want.v))
	}
	s.st.BytesVerified += int64(len(got))
}

func (s *soak) wrong(detail string) {
	s.st.WrongBytes++
	s.fail("WRONG BYTES", detail)
}

func (s *soak) verifyFile(f *fileState) {
	p := s.path(f)
	got := s.readFile(p)
	s.st.FilesChecked++
	unlinked, unlinking := f.unlinked, f.unlinking
	settled := func(v *fileVer) {
		f.acked, f.pending, f.live, f.closed = v, nil, v, true
		f.unlinking, f.unlinked = false, false
		if s.prof.volatile && v != nil { // nothing is durable: it may vanish at the next kill
			f.acked, f.pending = nil, []fileVer{*v}
		}
	}
	if got == nil {
		if unlinked && f.acked == nil && len(f.pending) == 0 {
			s.st.FilesUnlinkedGone++
		}
		if unlinking {
			// the kill interrupted an unlink: absent is one of its outcomes
		} else if f.acked != nil && len(f.pending) == 0 && f.acked.size > 0 && s.prof.mayFill {
			// No G4: G3 reclaim drops files whole, acknowledged or not
			// (documented); only counted.
			s.st.FilesAckedCapLost++
		} else if f.acked != nil && len(f.pending) == 0 && f.acked.size > 0 {
			s.fail("ACKED LOST", fmt.Sprintf("%s is gone after restart, but its version %d (%d bytes) was acknowledged (fsync returned, or seen after an earlier restart) and not rewritten since",
				p, f.acked.v, f.acked.size))
		}
		if f.acked != nil || len(f.pending) > 0 {
			s.st.FilesLostAllow++
		}
		settled(nil)
		f.live = nil
		return
	}
	if len(got) == 0 {
		if f.acked != nil && len(f.pending) == 0 && f.acked.size > 0 {
			s.fail("ACKED LOST", fmt.Sprintf("%s is empty after restart, but its version %d (%d bytes) was acknowledged and not rewritten since", p, f.acked.v, f.acked.size))
		}
		if f.acked == nil && len(f.pending) == 0 {
			what := "was never written"
			if unlinked {
				what = "was unlinked (unlink returned) and not recreated"
			}
			s.fail("WRONG BYTES", fmt.Sprintf("%s exists (empty) after restart but %s", p, what))
		}
		if len(f.pending) > 0 {
			s.st.FilesTruncAllow++
		}
		settled(&fileVer{v: 0, size: 0})
		return
	}
	allowed := f.allowed()
	for _, c := range allowed {
		if c.pages != nil {
			s.verifyStates(f, p, got, allowed, unlinked, settled)
			return
		}
	}
	pi := decodePage(got[:min(len(got), pageSize)], make([]byte, pageSize))
	if len(got) < pageSize {
		pi = pageInfo{}
	}
	var want *fileVer
	if pi.valid && pi.magic == magicFile && pi.id == f.id && pi.seed == s.seed && pi.index == 0 {
		for _, c := range allowed {
			if c.v == pi.version {
				want = &c
			}
		}
	}
	if want == nil && len(got) < pageSize { // a prefix shorter than the header page
		for _, c := range allowed {
			if img := fileImage(f.id, c.v, min(c.size, pageSize), s.seed); len(got) <= len(img) && firstDiff(got, img[:len(got)]) < 0 {
				want = &c
			}
		}
	}
	if want == nil {
		note := ""
		if unlinked {
			note = " (it was unlinked — unlink returned — and not recreated)"
		}
		s.wrong(fmt.Sprintf("%s after restart (%d bytes): its first page is %s; allowed: %s%s", p, len(got), pi, versions(allowed), note))
	}
	isAcked := f.acked != nil && f.acked.v == want.v
	if isAcked && len(got) != want.size {
		s.fail("ACKED LOST", fmt.Sprintf("%s after restart: %d bytes of the acknowledged version %d (%d bytes)", p, len(got), want.v, want.size))
	}
	s.checkPrefix(f, *want, got, p)
	switch {
	case isAcked:
		s.st.FilesAcked++
		s.st.AckedBytes += int64(len(got))
	case len(got) == want.size:
		s.st.FilesNewer++
	default:
		s.st.FilesTruncAllow++
	}
	settled(&fileVer{v: want.v, size: len(got)})
}

func versions(vs []fileVer) string {
	if len(vs) == 0 {
		return "none (the file should not exist)"
	}
	var b strings.Builder
	for i, v := range vs {
		if i > 0 {
			b.WriteString(", ")
		}
		if len(vs) > 12 && i == 6 {
			fmt.Fprintf(&b, "... %d more ..., ", len(vs)-12)
			i = len(vs) - 6
			v = vs[i]
		}
		b.WriteString(v.String())
	}
	return b.String()
}

// verifyStates checks a file one of whose allowed contents is a state of a
// truncate-and-rewrite run. The file must be exactly one state the file
// went through since its acknowledged one (the acknowledged state
// included), or a clean prefix of a whole-file version: a state is one
// moment of the run (after one pwrite or one ftruncate), so a page of a
// state is never mixed with a page of another one, and a page that state
// holds as written reads back as that version — zeros there are wrong;
// zeros are right only where the state has a hole (pages 1..63 after the
// first truncate). Pages are decoded one by one (each is self-verifying)
// and compared by version, so hundreds of states cost nothing extra.
func (s *soak) verifyStates(f *fileState, p string, got []byte, allowed []fileVer, unlinked bool, settled func(*fileVer)) {
	want, isAcked, why := matchState(f.id, s.seed, got, f.acked, f.pending)
	if want == nil {
		note := ""
		if unlinked {
			note = " (it was unlinked — unlink returned — and not recreated)"
		}
		s.wrong(fmt.Sprintf("%s after restart: %s; allowed (acknowledged %v): %s%s", p, why, f.acked, versions(allowed), note))
	}
	if isAcked && len(got) != want.size {
		s.fail("ACKED LOST", fmt.Sprintf("%s after restart: %d bytes of the acknowledged %s", p, len(got), want))
	}
	s.st.BytesVerified += int64(len(got))
	if want.pages != nil {
		s.st.FilesTruncState++
	}
	switch {
	case isAcked:
		s.st.FilesAcked++
		s.st.AckedBytes += int64(len(got))
	case len(got) == want.size:
		s.st.FilesNewer++
	default:
		s.st.FilesTruncAllow++
	}
	if want.pages == nil {
		want = &fileVer{v: want.v, size: len(got)}
	}
	settled(want)
}

// verifyExport reads the whole export and checks every sector; all wrong
// sectors are listed (with the export block they are in) before the soak
// stops.
func (s *soak) verifyExport() {
	cl, err := dialNBD(s.sock, "default", opTimeout)
	if err != nil {
		s.fail("NBD", fmt.Sprintf("connect for verification: %v", err))
	}
	defer cl.Close()
	observed := make([]uint64, sectors)
	buf := make([]byte, 1<<20)
	scratch := make([]byte, pageSize)
	var bad []string
	for off := 0; off < exportBytes; off += len(buf) {
		if err := cl.ReadAt(buf, int64(off)); err != nil {
			s.fail("NBD", fmt.Sprintf("read export [%d,%d) after restart: %v", off, off+len(buf), err))
		}
		for i := 0; i < len(buf); i += pageSize {
			sec := (off + i) / pageSize
			pi := decodePage(buf[i:i+pageSize], scratch)
			var v uint64
			switch {
			case pi.zero:
			case pi.valid && pi.magic == magicNBD && pi.index == uint64(sec) && pi.seed == s.seed:
				v = pi.version
			default:
				bad = append(bad, fmt.Sprintf("sector %d (offset %d, export block %d) is %s; allowed: %s",
					sec, sec*pageSize, sec*pageSize/s.exportBlock(), pi, s.describeSector(sec)))
				continue
			}
			match, ok, lost := s.exp.check(sec, pi.zero, v)
			if !ok {
				found := s.versionName(v)
				if pi.zero {
					found = "zeros"
				}
				bad = append(bad, fmt.Sprintf("sector %d (offset %d, export block %d) holds %s; allowed: %s",
					sec, sec*pageSize, sec*pageSize/s.exportBlock(), found, s.describeSector(sec)))
				continue
			}
			s.st.SectorsChecked++
			if pi.zero && match != 0 {
				s.st.SectorsZeroed++
			}
			switch {
			case lost:
				s.st.SectorsLostOK++
			case match == s.exp.durable[sec] && match != 0:
				s.st.SectorsDurable++
				s.st.AckedBytes += pageSize
			case match > s.exp.durable[sec]:
				s.st.SectorsNewer++
			}
			observed[sec] = v // zeros: 0, the never-written state
		}
		s.st.BytesVerified += int64(len(buf))
	}
	if len(bad) > 0 {
		s.st.WrongBytes += int64(len(bad)) * pageSize
		if len(bad) > 40 {
			bad = append(bad[:40], fmt.Sprintf("... and %d more", len(bad)-40))
		}
		s.fail("WRONG BYTES", fmt.Sprintf("%d export sectors wrong after restart (export block size %d):\n  %s",
			len(bad), s.exportBlock(), strings.Join(bad, "\n  ")))
	}
	if err := cl.Flush(); err != nil && !s.nospace(err) {
		s.fail("NBD", fmt.Sprintf("flush after verification: %v", err))
	}
	s.exp.settle(observed, s.prof.volatile)
}

// exportBlock is the export's block size: the default namespace block size
// of the profile (256 KiB when not set).
func (s *soak) exportBlock() int {
	switch s.prof.opts.BlockSize {
	case "64KiB":
		return 64 << 10
	case "128KiB":
		return 128 << 10
	}
	return 256 << 10
}

// versionName says which cycle wrote version v.
func (s *soak) versionName(v uint64) string {
	if v == 0 {
		return "zeros (never written)"
	}
	c := sort.Search(len(s.cycleFirstVersion), func(i int) bool { return s.cycleFirstVersion[i] > v }) - 1
	if c < 0 {
		return fmt.Sprintf("version %d", v)
	}
	return fmt.Sprintf("version %d (written in cycle %d)", v, c+1)
}

func (s *soak) describeSector(sec int) string {
	m := s.exp
	sent := make([]string, len(m.sent[sec]))
	for i, v := range m.sent[sec] {
		sent[i] = fmt.Sprint(v)
		if r := m.zeroReq(v); r != "" {
			sent[i] += "(zeros: " + r + ")"
		}
	}
	dur := s.versionName(m.durable[sec])
	if r := m.zeroReq(m.durable[sec]); r != "" {
		dur += " (zeros: " + r + ")"
	}
	return fmt.Sprintf("durable %s, last acknowledged %d, sent since the last verification [%s], found by the last verification: %s",
		dur, m.lastAcked[sec], strings.Join(sent, " "), s.versionName(m.seen[sec]))
}

// matchState finds what got is among the acknowledged content of file id
// and the states pending since (newest first): exactly one state, or a
// clean prefix of a whole-file version. nil and the reason when none.
func matchState(id, seed uint64, got []byte, acked *fileVer, pending []fileVer) (want *fileVer, isAcked bool, why string) {
	const invalid = ^uint64(0)
	full := len(got) / pageSize
	obs := make([]uint64, full)
	infos := make([]pageInfo, full)
	scratch := make([]byte, pageSize)
	for i := range obs {
		pi := decodePage(got[i*pageSize:(i+1)*pageSize], scratch)
		infos[i] = pi
		switch {
		case pi.zero:
		case pi.valid && pi.magic == magicFile && pi.id == id && pi.seed == seed && pi.index == uint64(i):
			obs[i] = pi.version
		default:
			obs[i] = invalid
		}
	}
	tail := got[full*pageSize:]
	matches := func(c fileVer) bool {
		if c.pages != nil {
			if len(got) != c.size {
				return false
			}
			for i, v := range obs {
				if v != c.pages[i] {
					return false
				}
			}
			return true
		}
		if len(got) > c.size {
			return false
		}
		for _, v := range obs {
			if v != c.v {
				return false
			}
		}
		if len(tail) > 0 {
			fillPage(scratch, magicFile, id, c.v, uint64(full), seed)
			return firstDiff(tail, scratch[:len(tail)]) < 0
		}
		return true
	}
	if acked != nil && matches(*acked) {
		c := *acked
		return &c, true, ""
	}
	for i := len(pending) - 1; i >= 0; i-- {
		if matches(pending[i]) {
			c := pending[i]
			return &c, false, ""
		}
	}
	allowed := append([]fileVer(nil), pending...)
	if acked != nil {
		allowed = append(allowed, *acked)
	}
	// Say which pages no allowed state has (zeros where every state has
	// data, another version, garbage), or that each page is one some state
	// allows but no state has them all (mixed states).
	var diffs []string
	sizeOK := false
	for _, c := range allowed {
		sizeOK = sizeOK || len(got) == c.size || (c.pages == nil && len(got) < c.size)
	}
	for i, v := range obs {
		ok := false
		for _, c := range allowed {
			if i < c.size/pageSize && c.page(i) == v {
				ok = true
				break
			}
		}
		if !ok && len(diffs) < 8 {
			diffs = append(diffs, fmt.Sprintf("page %d (offset %d) is %s", i, i*pageSize, infos[i]))
		}
	}
	what := "no allowed state has these pages: " + strings.Join(diffs, "; ")
	if len(diffs) == 0 {
		what = "every page is one some allowed state holds, but no single state has this combination (mixed states)"
	}
	if !sizeOK {
		what += fmt.Sprintf("; size %d is no allowed state's size", len(got))
	}
	return nil, false, fmt.Sprintf("%d bytes (%s): %s", len(got), pageMap(obs), what)
}
