package tiering

import (
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// dataDirCheckEvery is how often the store checks that its metadata file is
// still the one it opened.
const dataDirCheckEvery = 2 * time.Second

// fileID identifies a file across renames (device and inode).
type fileID struct{ dev, ino uint64 }

func statID(path string) (fileID, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, true
}

// watchDataDir notices the data directory (or its meta.db) being deleted
// or replaced under the running store: nothing the store records from then
// on would survive a restart, so it reports itself degraded (Stats.Degraded,
// status) and logs one clear error, instead of absorbing it silently.
//
// want is meta.db's identity when Open opened it.
func (s *Store) watchDataDir(want fileID) {
	defer s.wg.Done()
	path := filepath.Join(s.cfg.DataDir, "meta.db")
	t := time.NewTicker(dataDirCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		got, ok := statID(path)
		switch {
		case ok && got == want:
			continue
		case !ok:
			s.setDegraded("data directory " + s.cfg.DataDir + " or its meta.db was deleted under the running daemon: object records go to a deleted file and will not survive a restart; stop the daemon and fix the data directory")
		default:
			s.setDegraded(path + " was replaced under the running daemon: this daemon no longer writes the file a restart would read")
		}
		return
	}
}

func (s *Store) setDegraded(why string) {
	if s.degraded.CompareAndSwap(nil, &why) {
		s.log.Error("store degraded", "why", why)
	}
}
