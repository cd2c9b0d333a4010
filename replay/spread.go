package replay

import (
	"fmt"
	"os"
)

// Spread is the rule that routes each request of a multi-host replay to
// one host (one mount).
type Spread string

// Spreads.
const (
	// SpreadRR (default) sends request i, counted from 0 in replay order
	// (see ReadTrace), to host i mod N: a load balancer that ignores the
	// prompt, so a conversation's turns land on different hosts.
	SpreadRR Spread = "rr"
	// SpreadHash sends a request to host h mod N, where h hashes its first
	// K block ids (K = Options.HashBlocks, default 1: the first block id
	// alone) with the splitmix64 finalizer (mix64 in pattern.go), chained:
	// prefix-aware routing, so requests that share their first K blocks
	// share a host. A request with fewer blocks hashes those it has; one
	// without blocks goes to host 0. Every request of the Mooncake
	// conversation trace starts with block 0, so K = 1 sends that whole
	// trace to one host; K = 2 splits it into 7,373 prefix groups.
	SpreadHash Spread = "hash"
)

// ParseSpread returns the spread named s ("rr" or "hash"), or an error.
func ParseSpread(s string) (Spread, error) {
	switch Spread(s) {
	case SpreadRR, SpreadHash:
		return Spread(s), nil
	}
	return "", fmt.Errorf("replay: unknown spread %q (one of rr, hash)", s)
}

// Host returns the host, 0 to n-1, that request q at replay position i
// goes to among n hosts (n >= 1), hashing its first k block ids under
// SpreadHash (k < 1 counts as 1). It depends only on s, i, q's first k
// block ids, n and k, so a replay's routing is deterministic.
func (s Spread) Host(i int, q *Request, n, k int) int {
	if n <= 1 {
		return 0
	}
	if s == SpreadHash {
		if len(q.HashIDs) == 0 {
			return 0
		}
		var h uint64
		for _, id := range q.HashIDs[:min(max(k, 1), len(q.HashIDs))] {
			h = mix64(h*golden ^ uint64(id))
		}
		return int(h % uint64(n))
	}
	return i % n
}

// host is one mount of a replay.
type host struct {
	mount string
	// dom is the index of the first host whose mount is the same directory
	// (os.SameFile); hosts of one domain share in-flight write claims, as
	// they share files.
	dom int
}

// openHosts checks that every mount is an existing directory and groups
// mounts that name the same directory.
func openHosts(mounts []string) ([]host, error) {
	hosts := make([]host, len(mounts))
	infos := make([]os.FileInfo, len(mounts))
	for i, m := range mounts {
		if m == "" {
			return nil, fmt.Errorf("replay: mount %d is empty", i)
		}
		fi, err := os.Stat(m)
		if err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("replay: %s is not a directory", m)
		}
		infos[i] = fi
		hosts[i] = host{mount: m, dom: i}
		for j := range i {
			if os.SameFile(infos[j], fi) {
				hosts[i].dom = hosts[j].dom
				break
			}
		}
	}
	return hosts, nil
}
