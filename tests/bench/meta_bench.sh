#!/usr/bin/env bash
# meta_bench.sh — the metadata benchmark of issue 17 (make bench
# BENCH_ONLY=meta): what a namespace of many small KV files costs the daemon.
#
# One real daemon (./bin/ctxmemd run, or $META_BIN; real FUSE mount;
# --dram $META_DRAM so the data sinks to G3) gets META_FILES files of META_SIZE bytes from
# tests/bench/metafill ($META_WORKERS parallel writers): META_BIG of them in
# one directory big/ (the `ls -f` case), the rest in directories of 1,000.
# The same writer fills a tmpfs directory with the same layout, in
# META_ROUNDS interleaved slices (the order alternating), for the files/s
# reference. Then it reports:
#   - the daemon's VmRSS / RssAnon / RssFile / RssShmem, empty and full;
#     (VmRSS - G2 budget) / files and (VmRSS - VmRSS empty) / files;
#   - the live Go heap (pprof, after a GC) per file, and the top allocation
#     sites (the heap profile is kept in $META_OUT, default
#     /tmp/ctxmem-meta-prof, for `go tool pprof`);
#   - bytes of metadata on disk (the data directory without g3/ and g4/) per file;
#   - `ls -f big | wc -l` time, with the kernel's caches warm and after restart;
#   - restart: SIGTERM to exit, then start to the first successful stat of a
#     known file, to "fusefs: tree reconciled" and to "tiering store
#     recovered" in the log; VmRSS after restart; a CPU profile of
#     start-up ($META_OUT/cpu-start.pb.gz);
#   - the kernel's fuse_inode + dentry slab growth (not in the daemon's RSS).
#
# Environment: META_FILES (default 1000000; QUICK=1: 100000), META_BIG
# (default META_FILES/2), META_SIZE (4096), META_WORKERS (8), META_ROUNDS
# (4), META_DRAM (64MiB), META_G3_SIZE (default files × size × 2 + 1 GiB),
# META_PPROF (127.0.0.1:6071), META_BIN (the daemon binary, default
# ./bin/ctxmemd), META_WORK (parent of the scratch directory, default
# /tmp; it holds the data directory: G3 segments and metadata).
# Needs root, /dev/fuse, go, curl.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
QUICK=${QUICK:-0}
files=${META_FILES:-$([[ $QUICK == 1 ]] && echo 100000 || echo 1000000)}
big=${META_BIG:-$((files / 2))}
size=${META_SIZE:-4096}
workers=${META_WORKERS:-8}
rounds=${META_ROUNDS:-4}
dram=${META_DRAM:-64MiB}
g3=${META_G3_SIZE:-$((files * size * 2 + (1 << 30)))}
pprof=${META_PPROF:-127.0.0.1:6071}
out=${META_OUT:-/tmp/ctxmem-meta-prof}
mkdir -p "$out"

bin=${META_BIN:-./bin/ctxmemd}
[[ -x $bin ]] || make -s build
work=$(mktemp -d "${META_WORK:-/tmp}/ctxmem-meta.XXXXXX")
shm=$(mktemp -d /dev/shm/ctxmem-meta.XXXXXX)
go build -o "$work/metafill" ./tests/bench/metafill
pid=""
cleanup() {
	[[ -n $pid ]] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
	mountpoint -q "$work/mnt" 2>/dev/null && { umount "$work/mnt" 2>/dev/null || umount -l "$work/mnt" || true; }
	rm -rf "$work" "$shm"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
kib() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status"; }
mem_line() { # PID LABEL
	printf '%-26s VmRSS %7d MiB  RssAnon %7d MiB  RssFile %5d MiB  RssShmem %6d MiB  VmHWM %7d MiB\n' "$2" \
		$(($(kib "$1" VmRSS) / 1024)) $(($(kib "$1" RssAnon) / 1024)) $(($(kib "$1" RssFile) / 1024)) \
		$(($(kib "$1" RssShmem) / 1024)) $(($(kib "$1" VmHWM) / 1024))
}
slab_kib() { # KiB of the kernel's fuse_inode and dentry slabs (active objects × object size; not in the daemon's RSS)
	awk '$1 == "fuse_inode" || $1 == "dentry" { s += $2 * $4 } END { printf "%d", s / 1024 }' /proc/slabinfo 2>/dev/null || echo 0
}
heap_inuse() { # bytes of live heap after a GC (runtime.MemStats HeapInuse via the heap profile's text form)
	curl -fsS "http://$pprof/debug/pprof/heap?gc=1&debug=1" | awk '/^# HeapInuse = / { print $4 }'
}

: >"$work/empty.yaml"
log=$work/daemon.log
start_daemon() {
	CTXMEM_PPROF=$pprof "$bin" run --config "$work/empty.yaml" --mount "$work/mnt" --data-dir "$work/data" \
		--dram "$dram" --g3-size "$g3" --metrics "" ${CTXMEMD_FLAGS:-} >>"$log" 2>&1 &
	pid=$!
}
wait_ready() {
	for _ in $(seq 600); do
		[[ -d $work/mnt/default ]] && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	cat "$log" >&2
	echo "meta_bench: the daemon did not come up" >&2
	exit 1
}

echo "files $files (big/ $big, the rest 1,000 per directory) of $size bytes, $workers writers, G2 $dram, G3 $g3 bytes, $(nproc) CPUs, $(uname -r)"
start_daemon
wait_ready
sleep 2
mem_line "$pid" "empty daemon"
slab0=$(slab_kib)
rss0=$(kib "$pid" VmRSS)
heap0=$(heap_inuse)
mnt=$work/mnt/default/meta

# Create: interleaved slices, tmpfs and the mount alternating first.
t_mnt=0 t_shm=0
for ((r = 0; r < rounds; r++)); do
	lo=$((files * r / rounds)) hi=$((files * (r + 1) / rounds))
	order=(mnt shm)
	((r % 2)) && order=(shm mnt)
	for tgt in "${order[@]}"; do
		d=$mnt
		[[ $tgt == shm ]] && d=$shm/meta
		line=$(flock /tmp/ctxmem-bench.lock "$work/metafill" -dir "$d" -files "$files" -big "$big" -size "$size" -workers "$workers" -from "$lo" -to "$hi")
		s=$(awk '{ print $4 }' <<<"$line")
		if [[ $tgt == mnt ]]; then t_mnt=$(awk -v a="$t_mnt" -v b="$s" 'BEGIN { print a + b }'); else t_shm=$(awk -v a="$t_shm" -v b="$s" 'BEGIN { print a + b }'); fi
		echo "  slice $((r + 1))/$rounds $tgt: $line"
	done
done
awk -v n="$files" -v a="$t_mnt" -v b="$t_shm" 'BEGIN { printf "create (files/s, whole run): ctxmemd %.0f  tmpfs %.0f  ratio %.2f\n", n / a, n / b, b / a }'
rm -rf "$shm/meta" &
rmpid=$!

# Let write-back and demotion settle, then measure.
sleep 10
wait "$rmpid"
mem_line "$pid" "full daemon"
rss1=$(kib "$pid" VmRSS)
slab1=$(slab_kib)
awk -v a="$slab0" -v b="$slab1" -v n="$files" 'BEGIN { printf "kernel fuse_inode + dentry slabs: +%.0f MiB, %.0f B per file (not in RSS; machine-wide)\n", (b - a) / 1024, (b - a) * 1024 / n }'
heap1=$(heap_inuse)
curl -fsS "http://$pprof/debug/pprof/heap?gc=1" -o "$out/heap-full.pb.gz"
g2=$("$bin" status --admin "$work/data/admin.sock" 2>/dev/null | grep -iE '^ *(G2|dram)' | head -1 || true)
echo "status: $g2"
dram_bytes=$(numfmt --from=iec-i "${dram/B/}" 2>/dev/null || numfmt --from=iec "${dram%iB}")
awk -v r0="$rss0" -v r1="$rss1" -v h0="$heap0" -v h1="$heap1" -v d="$dram_bytes" -v n="$files" 'BEGIN {
	printf "per file: (VmRSS - G2 budget) %.0f B; (VmRSS full - empty) %.0f B; live Go heap (full - empty) %.0f B\n",
		(r1 * 1024 - d) / n, (r1 - r0) * 1024 / n, (h1 - h0) / n }'

# Metadata on disk.
echo "metadata on disk (data directory without g3/ and g4/):"
(cd "$work/data" && find . -path ./g3 -prune -o -path ./g4 -prune -o -type f -printf '%s %p\n' | sort -rn | head -8 | sed 's/^/  /')
meta_bytes=$(cd "$work/data" && find . -path ./g3 -prune -o -path ./g4 -prune -o -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
awk -v b="$meta_bytes" -v n="$files" 'BEGIN { printf "  total %.1f MiB, %.0f B per file\n", b / 1048576, b / n }'

# ls -f of the big directory, kernel caches warm.
if ((big > 0)); then
	t=$(now)
	c=$(ls -f "$mnt/big" | wc -l)
	echo "ls -f big | wc -l (warm): $c entries in $(since "$t") s"
fi

# Restart.
known=$mnt/d00000/f$(printf %08d "$big")
((big == files)) && known=$mnt/big/f00000000
t=$(now)
kill -TERM "$pid"
wait "$pid" || true
echo "stop (SIGTERM to exit): $(since "$t") s"
mountpoint -q "$work/mnt" && umount -l "$work/mnt"
: >"$log"
t=$(now)
start_daemon
# A CPU profile of start-up (pprof is served before G3 opens).
prof_s=$((files / 100000 * 15 + 5))
((prof_s > 300)) && prof_s=300
(for _ in $(seq 500); do curl -fsS "http://$pprof/debug/pprof/profile?seconds=$prof_s" -o "$out/cpu-start.pb.gz" 2>/dev/null && break; sleep 0.02; done) &
profpid=$!
t_stat="" t_rec="" t_tier=""
for _ in $(seq 60000); do
	[[ -z $t_stat ]] && stat "$known" >/dev/null 2>&1 && t_stat=$(since "$t")
	[[ -z $t_rec ]] && grep -q 'fusefs: tree reconciled' "$log" && t_rec=$(since "$t")
	[[ -z $t_tier ]] && grep -q 'tiering store recovered' "$log" && t_tier=$(since "$t")
	[[ -n $t_stat && -n $t_rec && -n $t_tier ]] && break
	kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
	sleep 0.01
done
echo "restart: first stat of a known file ${t_stat:-never} s; 'tiering store recovered' ${t_tier:-never} s; 'fusefs: tree reconciled' ${t_rec:-never} s"
grep -E 'tiering store recovered|tree reconciled' "$log" | sed 's/^/  /'
sleep 2
mem_line "$pid" "restarted daemon"
heap2=$(heap_inuse)
curl -fsS "http://$pprof/debug/pprof/heap?gc=1" -o "$out/heap-restarted.pb.gz"
awk -v r0="$rss0" -v r1="$(kib "$pid" VmRSS)" -v h0="$heap0" -v h1="$heap2" -v n="$files" 'BEGIN {
	printf "per file after restart: (VmRSS - empty) %.0f B; live Go heap (restarted - empty) %.0f B\n", (r1 - r0) * 1024 / n, (h1 - h0) / n }'
if ((big > 0)); then
	t=$(now)
	c=$(ls -f "$mnt/big" | wc -l)
	echo "ls -f big | wc -l (after restart, kernel caches cold): $c entries in $(since "$t") s"
	mem_line "$pid" "after ls -f"
fi
wait "$profpid" || true
echo "start-up CPU profile (first $prof_s s): $out/cpu-start.pb.gz"
go tool pprof -top -cum -nodecount=25 "$bin" "$out/cpu-start.pb.gz" 2>/dev/null | sed -n '5,40p' | sed 's/^/  /'
echo "heap profiles: $out/heap-full.pb.gz, $out/heap-restarted.pb.gz (go tool pprof -sample_index=inuse_space -top bin/ctxmemd FILE)"
go tool pprof -sample_index=inuse_space -top -nodecount=25 "$bin" "$out/heap-full.pb.gz" 2>/dev/null | sed 's/^/  /'
