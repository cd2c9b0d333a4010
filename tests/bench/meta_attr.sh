#!/usr/bin/env bash
# meta_attr.sh BIN PROFILE FILES — the live heap of a ctxmemd heap profile
# (tests/bench/meta_bench.sh keeps them in $META_OUT) per file, grouped by
# owner: the flat inuse_space of each allocation site, divided by FILES.
# The table "Where the bytes per file go" in docs/benchmarks.md was made
# with it. A sampled profile: about ±10 %.
#
#   bash tests/bench/meta_attr.sh bin/ctxmemd /tmp/ctxmem-meta-prof/heap-full.pb.gz 1000000
set -euo pipefail
(($# == 3)) || { echo "usage: $0 BIN PROFILE FILES" >&2; exit 2; }
go tool pprof -sample_index=inuse_space -top -unit=B -nodecount=400 "$1" "$2" 2>/dev/null | awk -v n="$3" '
$1 ~ /B$/ && $6 != "" {
	b = $1; sub(/B$/, "", b); f = $6
	c = "other"
	if (f ~ /go-fuse\/v2\/fs\./ || f ~ /fusefs\.\(\*fsys\)\.opsFor/) c = "go-fuse fs.Inode (in fusefs fileNode/dirNode) + its maps"
	else if (f ~ /go-fuse\/v2\/fuse\./) c = "go-fuse server buffers"
	else if (f ~ /fusefs\.\(\*dirNode\)\.newNode/) c = "fusefs node"
	else if (f ~ /fusefs\.\(\*dirNode\)\.insert/) c = "fusefs links + byObj map"
	else if (f ~ /catalog\./) c = "catalog Dir (name index of directories)"
	else if (f ~ /tiering\.\(\*Store\)\.CreateWith/) c = "tiering object + objects map"
	else if (f ~ /tiering\.\(\*Store\)\.writeBlock/) c = "tiering blockState + blocks map"
	else if (f ~ /beginBusy|signalFlushed/) c = "tiering busy map + flush channel"
	else if (f ~ /tiering\/g3\./) c = "G3 index (key -> segment)"
	else if (f ~ /ctxmemd\/heat\./) c = "heat tracker + ranking"
	else if (f ~ /sidecar\/scheduler\./) c = "embedded scheduler (holdings, views)"
	else if (f ~ /tiering\./) c = "tiering other (G4 sink buffers, Stats of a heat report: transient)"
	else if (f ~ /msgpack|bbolt/) c = "decode / bbolt"
	s[c] += b; t += b
}
END { for (c in s) printf "%-58s %8.0f B/file %6.1f %%\n", c, s[c] / n, 100 * s[c] / t; printf "%-58s %8.0f B/file\n", "total (sampled live heap)", t / n }' | sort
