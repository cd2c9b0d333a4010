package scheduler

import (
	"sort"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/sidecar/msg"
)

// stored feeds host's stored events for paths (object ids 1, 2, ...).
func stored(s *Scheduler, host string, pool *msg.Pool, paths ...string) {
	e := &msg.Events{V: msg.Version, Host: host, Boot: dBoot}
	for i, p := range paths {
		e.Events = append(e.Events, msg.Event{Kind: msg.EvStored, Namespace: "ns", Path: p, ID: uint64(i + 1)})
	}
	s.onEvents(e)
	s.mu.Lock()
	s.hosts[host].last = &msg.Report{V: msg.Version, Host: host, Boot: dBoot, Time: time.Now().UnixNano(), Pool: pool}
	s.mu.Unlock()
}

func wanted(s *Scheduler, host string, paths ...string) []*msg.Command {
	e := &msg.Events{V: msg.Version, Host: host, Boot: dBoot}
	for _, p := range paths {
		e.Events = append(e.Events, msg.Event{Kind: msg.EvWanted, Namespace: "ns", Path: p})
	}
	return s.onEvents(e)
}

func TestWantedNameIsSharedByItsHolder(t *testing.T) {
	s := decider(t, Config{})
	stored(s, "a", &msg.Pool{Extents: 10}, "sess1/l0", "sess1/l1", "sess2/l0")
	// A file: its holder shares it.
	cmds := wanted(s, "b", "sess2/l0")
	if len(cmds) != 1 || cmds[0].Host != "a" || cmds[0].Op != msg.OpShare || cmds[0].Path != "sess2/l0" || cmds[0].Object != 3 {
		t.Fatalf("wanted file: %+v", cmds)
	}
	// A directory: every file under it.
	cmds = wanted(s, "b", "sess1")
	var paths []string
	for _, c := range cmds {
		paths = append(paths, c.Path)
	}
	sort.Strings(paths)
	if len(paths) != 2 || paths[0] != "sess1/l0" || paths[1] != "sess1/l1" {
		t.Fatalf("wanted directory shared %v", paths)
	}
	// Once shared (the holder's event), nothing more is asked.
	s.onEvents(&msg.Events{V: msg.Version, Host: "a", Boot: dBoot,
		Events: []msg.Event{{Kind: msg.EvShared, Namespace: "ns", Path: "sess2/l0", ID: 3}}})
	if cmds := wanted(s, "c", "sess2/l0"); len(cmds) != 0 {
		t.Fatalf("already shared, asked again: %+v", cmds)
	}
	// Nobody else holds it, or the holder has no pool: nothing.
	if cmds := wanted(s, "a", "sess1/l0"); len(cmds) != 0 {
		t.Fatalf("wanted by its own holder: %+v", cmds)
	}
	s2 := decider(t, Config{})
	stored(s2, "a", nil, "x")
	if cmds := wanted(s2, "b", "x"); len(cmds) != 0 {
		t.Fatalf("holder without a pool asked to share: %+v", cmds)
	}
	s3 := decider(t, Config{})
	stored(s3, "a", &msg.Pool{Extents: 10, Bypass: true}, "x")
	if cmds := wanted(s3, "b", "x"); len(cmds) != 0 {
		t.Fatalf("holder in bypass asked to share: %+v", cmds)
	}
	// A removal forgets the name and its directory.
	s.onEvents(&msg.Events{V: msg.Version, Host: "a", Boot: dBoot,
		Events: []msg.Event{{Kind: msg.EvRemoved, ID: 1}, {Kind: msg.EvRemoved, ID: 2}}})
	if cmds := wanted(s, "b", "sess1"); len(cmds) != 0 {
		t.Fatalf("removed files still shared: %+v", cmds)
	}
}

// reclaimedOn returns the extents of cmds, sorted, failing unless every
// command is a reclaim on host.
func reclaimedOn(t *testing.T, cmds []*msg.Command, host string) []uint32 {
	t.Helper()
	var got []uint32
	for _, c := range cmds {
		if c.Op != msg.OpReclaim || c.Host != host {
			t.Fatalf("command %+v, want a reclaim on %s", c, host)
		}
		got = append(got, c.Extent)
	}
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	return got
}

func TestPoolAboveHighWatermarkReclaimsLeastRecentlyUsed(t *testing.T) {
	s := decider(t, Config{})
	now := time.Now()
	s.mu.Lock()
	// 10 extents; a holds 5 (0-4), b holds 5 (5-9): 100% > 90%.
	for i, h := range []string{"a", "b"} {
		held := []uint32{}
		use := map[uint32]int64{}
		for e := uint32(i * 5); e < uint32(i*5+5); e++ {
			held = append(held, e)
			use[e] = now.Add(-time.Duration(100-e) * time.Second).UnixNano() // extent 0 oldest
		}
		hv := s.hostLocked(h, dBoot)
		hv.last = &msg.Report{Host: h, Boot: dBoot, Pool: &msg.Pool{Extents: 10, Held: held, LastUse: use}}
	}
	// A later read of extent 1 on b makes it recent.
	s.hosts["b"].last.Pool.LastUse[1] = now.Add(time.Hour).UnixNano()
	cmds := s.poolLocked(now)
	s.mu.Unlock()
	// Down to 75%: 10 held - 7 = 3 reclaims, of extents 0, 2, 3.
	got := reclaimedOn(t, cmds, "a")
	if len(got) != 3 || got[0] != 0 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("reclaimed extents %v, want [0 2 3]", got)
	}
	// Under the watermark: nothing.
	s.mu.Lock()
	s.hosts["a"].last.Pool.Held = []uint32{0}
	s.hosts["b"].last.Pool.Held = []uint32{5}
	cmds = s.poolLocked(now)
	s.mu.Unlock()
	if len(cmds) != 0 {
		t.Fatalf("reclaim under the watermark: %+v", cmds)
	}
}

// A host that found the pool full while holding less than its fair share
// (a restarted host, beside one that shared every file) gets extents
// reclaimed from the host above its share, least recently used first,
// once per starvation it reports, though the pool is under its high
// watermark; a host at its fair share gets none.
func TestStarvedHostGetsItsFairShare(t *testing.T) {
	s := decider(t, Config{})
	now := time.Now()
	s.mu.Lock()
	report := func(h string, held []uint32, starvedAt int64) {
		use := map[uint32]int64{}
		for _, e := range held {
			use[e] = now.Add(-time.Duration(100-e) * time.Second).UnixNano() // lower extents older
		}
		hv := s.hostLocked(h, dBoot)
		hv.last = &msg.Report{Host: h, Boot: dBoot, Pool: &msg.Pool{Extents: 10, Held: held, LastUse: use, StarvedAt: starvedAt}}
	}
	// 10 extents, 3 live hosts: a fair share of 3. a holds 8 (0-7), b 1
	// (8), c none and starved: 9 of 10 leased, not above 90%.
	report("a", []uint32{0, 1, 2, 3, 4, 5, 6, 7}, 0)
	report("b", []uint32{8}, 0)
	report("c", nil, now.UnixNano())
	cmds := s.poolLocked(now)
	s.mu.Unlock()
	got := reclaimedOn(t, cmds, "a")
	if len(got) != fairGrant || got[0] != 0 || got[1] != 1 {
		t.Fatalf("reclaimed extents %v, want a's two least recently used [0 1]", got)
	}
	// The same starvation is answered once.
	s.mu.Lock()
	cmds = s.poolLocked(now)
	s.mu.Unlock()
	if len(cmds) != 0 {
		t.Fatalf("one starvation answered twice: %+v", cmds)
	}
	// A later one is answered again (the first reclaims still pending:
	// other extents).
	for _, c := range got {
		s.sent[msg.CommandID(msg.OpReclaim, "a", dBoot, c, now.Unix()/30)] = now
	}
	s.mu.Lock()
	s.hosts["c"].last.Pool.StarvedAt = now.Add(time.Second).UnixNano()
	cmds = s.poolLocked(now)
	s.mu.Unlock()
	if len(cmds) != fairGrant || cmds[0].Extent != 2 || cmds[1].Extent != 3 {
		t.Fatalf("second starvation: %+v, want reclaims of a's extents 2 and 3", cmds)
	}
	// Two starved hosts share the one host above its share: together they
	// take it down to its share, not below (9 extents, fair share 3; a
	// holds 5).
	s.mu.Lock()
	report("a", []uint32{0, 1, 2, 3, 4}, 0)
	report("b", nil, now.Add(3*time.Second).UnixNano())
	report("c", nil, now.Add(3*time.Second).UnixNano())
	for _, h := range []string{"a", "b", "c"} {
		s.hosts[h].last.Pool.Extents = 9
	}
	s.sent = map[string]time.Time{}
	cmds = s.poolLocked(now)
	s.mu.Unlock()
	if got := reclaimedOn(t, cmds, "a"); len(got) != 2 {
		t.Fatalf("two starved hosts took %v from a (5 held, fair share 3), want 2 extents", got)
	}
	// A starved host at its fair share gets nothing.
	s.mu.Lock()
	report("a", []uint32{0, 1, 2, 3, 4, 5}, 0)
	report("c", []uint32{7, 8, 9}, now.Add(2*time.Second).UnixNano())
	report("b", nil, 0)
	cmds = s.poolLocked(now)
	s.mu.Unlock()
	if len(cmds) != 0 {
		t.Fatalf("a host at its fair share got reclaims: %+v", cmds)
	}
}

func TestStaleShareIsForcedAgainFromAComputingHost(t *testing.T) {
	s := decider(t, Config{})
	stored(s, "a", &msg.Pool{Extents: 10}, "f")
	first := wanted(s, "b", "f")
	if len(first) != 1 || first[0].Force {
		t.Fatalf("first share: %+v", first)
	}
	// a shares it; b imports it (b is now a holder, but only of the pool
	// record); then c finds the record stale.
	s.onEvents(&msg.Events{V: msg.Version, Host: "a", Boot: dBoot,
		Events: []msg.Event{{Kind: msg.EvShared, Namespace: "ns", Path: "f", ID: 1}}})
	s.onEvents(&msg.Events{V: msg.Version, Host: "b", Boot: dBoot,
		Events: []msg.Event{{Kind: msg.EvImported, Namespace: "ns", Path: "f", ID: 9}}})
	s.mu.Lock()
	s.hosts["b"].last = &msg.Report{V: msg.Version, Host: "b", Boot: dBoot, Pool: &msg.Pool{Extents: 10}}
	s.mu.Unlock()
	s.onEvents(&msg.Events{V: msg.Version, Host: "c", Boot: dBoot,
		Events: []msg.Event{{Kind: msg.EvStale, Namespace: "ns", Path: "f"}}})
	again := wanted(s, "c", "f")
	if len(again) != 1 || again[0].Host != "a" || !again[0].Force || again[0].ID == first[0].ID {
		t.Fatalf("share after stale: %+v (first %s)", again, first[0].ID)
	}
	// Only importers hold it: nobody can share it.
	s2 := decider(t, Config{})
	s2.onEvents(&msg.Events{V: msg.Version, Host: "b", Boot: dBoot,
		Events: []msg.Event{{Kind: msg.EvImported, Namespace: "ns", Path: "g", ID: 4}}})
	s2.mu.Lock()
	s2.hosts["b"].last = &msg.Report{V: msg.Version, Host: "b", Boot: dBoot, Pool: &msg.Pool{Extents: 10}}
	s2.mu.Unlock()
	if cmds := wanted(s2, "c", "g"); len(cmds) != 0 {
		t.Fatalf("an importer was asked to share: %+v", cmds)
	}
}

// A removal of an earlier object id of a name does not drop the host
// that holds the name again under a newer id (the file was deleted and
// made again, and the removal came late): a want still reaches it, for
// the new id.
func TestLateRemovalOfAnOldIDKeepsTheHolder(t *testing.T) {
	s := decider(t, Config{})
	stored(s, "a", &msg.Pool{Extents: 10}, "f") // id 1
	s.onEvents(&msg.Events{V: msg.Version, Host: "a", Boot: dBoot,
		Events: []msg.Event{{Kind: msg.EvStored, Namespace: "ns", Path: "f", ID: 7}}})
	s.onEvents(&msg.Events{V: msg.Version, Host: "a", Boot: dBoot,
		Events: []msg.Event{{Kind: msg.EvRemoved, ID: 1}}})
	cmds := wanted(s, "b", "f")
	if len(cmds) != 1 || cmds[0].Host != "a" || cmds[0].Object != 7 {
		t.Fatalf("want of f after a late removal of its old id: %+v, want a share of object 7 on a", cmds)
	}
	// The removal of the current id drops it.
	s.onEvents(&msg.Events{V: msg.Version, Host: "a", Boot: dBoot,
		Events: []msg.Event{{Kind: msg.EvRemoved, ID: 7}}})
	s.mu.Lock()
	delete(s.shareFailAt, objKey{"ns", "f"})
	s.mu.Unlock()
	if cmds := wanted(s, "b", "f"); len(cmds) != 0 {
		t.Fatalf("want of a removed name: %+v", cmds)
	}
}
