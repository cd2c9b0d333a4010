#!/usr/bin/env bash
# fio_bench.sh — a ctxmemd mount against tmpfs and go-fuse's loopback
# (passthrough) in one run, one side-by-side table (issue 12).
#
# Usage: tests/bench/fio_bench.sh MOUNT_DIR TMPFS_DIR [LOOPBACK_DIR]
#        tests/bench/fio_bench.sh            (standalone, root: starts them)
#   MOUNT_DIR     a directory inside a ctxmemd mount (e.g. /mnt/ctxmem/default)
#   TMPFS_DIR     a directory on tmpfs (e.g. /dev/shm)
#   LOOPBACK_DIR  a go-fuse loopback mount over tmpfs (optional: column "-")
# Without arguments it starts ctxmemd (./bin/ctxmemd, --dram $DRAM
# --g3-size $G3_SIZE), go-fuse's example/loopback over a fresh /dev/shm dir,
# probes that the loopback's passthrough is active, and uses a fresh
# /dev/shm dir as tmpfs; everything is stopped and removed on exit.
#
# Each round runs every job on every target, in a fresh subdirectory, the
# order of the targets rotated per round (tmpfs ctxmemd loopback, then
# ctxmemd loopback tmpfs, ...), under flock /tmp/ctxmem-bench.lock so two
# benchmark runs on one machine never overlap; the table shows medians:
#   seqwrite  256 KiB sequential write of SIZE, end_fsync=1 (psync, QD 1)
#   seqread   256 KiB sequential read of that file (fio invalidate=1)
#   randread  4 KiB random reads of that file for RUNTIME s (invalidate=1)
#   kv write  create+write+close FILES files of 256 KiB (tests/bench/kvjob)
#   kv read dropped  open+read+close each, random order, after
#             posix_fadvise(DONTNEED) of every file (the files' own page
#             cache only; a no-op on tmpfs, whose pages are the file)
#   kv read warm     the same again, page cache warm
# Ratios are ctxmemd/tmpfs and ctxmemd/loopback (higher is better, except
# for the p99 row where lower is better).
#
# Environment: SIZE (fio file, default 1G), RUNTIME (randread s, default 10),
# FILES (kv files, default 2000), ROUNDS (default 3), DIRECT (fio direct=,
# default 0), QUICK=1 (defaults SIZE=256M RUNTIME=3 FILES=500 ROUNDS=1),
# DAEMON_PID (ctxmemd's pid: memory row), ADMIN_SOCK (its admin socket:
# G2 residency line), DRAM/G3_SIZE (standalone daemon,
# default 4GiB/8GiB), PASSTHROUGH/PASSTHROUGH_WHY (the caller's probe).
# Needs fio, jq and go (for kvjob). Exit status 0 when every job ran.
set -euo pipefail

if [[ $# -eq 1 || $# -gt 3 || ${1:-} == -h || ${1:-} == --help ]]; then
	sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
fi
if [[ ${QUICK:-0} == 1 ]]; then
	SIZE=${SIZE:-256M} RUNTIME=${RUNTIME:-3} FILES=${FILES:-500} ROUNDS=${ROUNDS:-1}
fi
SIZE=${SIZE:-1G}
RUNTIME=${RUNTIME:-10}
DIRECT=${DIRECT:-0}
FILES=${FILES:-2000}
ROUNDS=${ROUNDS:-3}
DRAM=${DRAM:-4GiB}
G3_SIZE=${G3_SIZE:-8GiB}
LOCK=/tmp/ctxmem-bench.lock

for tool in fio jq go; do
	command -v "$tool" >/dev/null || { echo "fio_bench: $tool is not installed" >&2; exit 2; }
done

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
# shellcheck source=tests/bench/targets.sh
. "$here/targets.sh"
work=$(mktemp -d /tmp/ctxmem-fio-bench.XXXXXX)
sampler=""
cleanup=()
on_exit() {
	[[ -n $sampler ]] && { kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null; }
	((${#cleanup[@]})) && rm -rf "${cleanup[@]}"
	stop_targets
	rm -rf "$work"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

if [[ $# -eq 0 ]]; then
	[[ $(id -u) == 0 ]] || { echo "fio_bench: standalone mode needs root (FUSE mounts)" >&2; exit 2; }
	echo "fio_bench: starting ctxmemd (--dram $DRAM --g3-size $G3_SIZE) and go-fuse loopback..." >&2
	make -s build
	start_ctxmemd "$work"
	start_loopback "$work"
	probe_passthrough "$work"
	TMPFS_DIR=$(mktemp -d /dev/shm/ctxmem-bench-tmpfs.XXXXXX)
	cleanup+=("$TMPFS_DIR")
	MOUNT_DIR=$CTXMEMD_DIR DAEMON_PID=$CTXMEMD_PID ADMIN_SOCK=$work/data/admin.sock
else
	MOUNT_DIR=$1 TMPFS_DIR=$2 LOOPBACK_DIR=${3:-}
fi
DAEMON_PID=${DAEMON_PID:-}
ADMIN_SOCK=${ADMIN_SOCK:-}
for d in "$MOUNT_DIR" "$TMPFS_DIR" ${LOOPBACK_DIR:+"$LOOPBACK_DIR"}; do
	[[ -d $d ]] || { echo "fio_bench: $d is not a directory" >&2; exit 2; }
done
if [[ $(stat -f -c %T "$TMPFS_DIR") != tmpfs ]]; then
	echo "fio_bench: warning: $TMPFS_DIR is $(stat -f -c %T "$TMPFS_DIR"), not tmpfs" >&2
fi
targets=(tmpfs ctxmemd)
declare -A DIR=([tmpfs]=$TMPFS_DIR [ctxmemd]=$MOUNT_DIR)
if [[ -n $LOOPBACK_DIR ]]; then
	targets+=(loopback)
	DIR[loopback]=$LOOPBACK_DIR
	lb_pid=${LOOPBACK_PID:-}
fi

go build -o "$work/kvjob" ./tests/bench/kvjob

# fio_job NAME DIR ARGS... — runs one fio job and prints its JSON.
fio_job() {
	local name=$1 dir=$2
	shift 2
	fio --name="$name" --directory="$dir" --filename=bench.dat --size="$SIZE" \
		--ioengine=psync --iodepth=1 --direct="$DIRECT" --output-format=json "$@"
}

# cpu_ms PID — user+system CPU of a process so far, in ms.
cpu_ms() {
	awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print int(($12 + $13) * 1000 / hz) }' "/proc/$1/stat"
}

# sample_mem PID OUT — until killed, writes the peak VmRSS, RssAnon and
# RssShmem (KiB) seen every 50 ms to OUT.
sample_mem() {
	local pid=$1 out=$2 rss=0 anon=0 shm=0 r a s
	while [[ -r /proc/$pid/status ]]; do
		read -r r a s < <(awk '/^VmRSS:/ {r=$2} /^RssAnon:/ {a=$2} /^RssShmem:/ {s=$2} END {print r+0, a+0, s+0}' "/proc/$pid/status")
		((r > rss)) && rss=$r
		((a > anon)) && anon=$a
		((s > shm)) && shm=$s
		echo "$rss $anon $shm" >"$out.tmp" && mv "$out.tmp" "$out"
		sleep 0.05
	done
}

declare -A R
# bench TARGET ROUND — runs every job on TARGET, fills R[TARGET.metric.ROUND].
bench() {
	local t=$1 r=$2 dir=${DIR[$1]}/fio-bench-$$-$2 j c0
	mkdir -p "$dir"
	cleanup+=("$dir")
	j=$(fio_job seqwrite "$dir" --rw=write --bs=256k --end_fsync=1)
	R[$t.seqwrite.$r]=$(jq '.jobs[0].write.bw_bytes / 1048576' <<<"$j")
	[[ $t == loopback && -n $lb_pid ]] && c0=$(cpu_ms "$lb_pid")
	j=$(fio_job seqread "$dir" --rw=read --bs=256k --invalidate=1)
	R[$t.seqread.$r]=$(jq '.jobs[0].read.bw_bytes / 1048576' <<<"$j")
	j=$(fio_job randread "$dir" --rw=randread --bs=4k --invalidate=1 --time_based --runtime="$RUNTIME")
	R[$t.randread.$r]=$(jq '.jobs[0].read.iops' <<<"$j")
	R[$t.randread_bytes.$r]=$(jq '.jobs[0].read.io_bytes' <<<"$j")
	[[ $t == loopback && -n $lb_pid ]] && R[loopback.read_cpu_ms.$r]=$(($(cpu_ms "$lb_pid") - c0))
	rm -f "$dir/bench.dat"
	if [[ $t == ctxmemd && -n $DAEMON_PID ]]; then
		sample_mem "$DAEMON_PID" "$work/mem.$r" &
		sampler=$!
	fi
	j=$("$work/kvjob" -dir "$dir/kv" -files "$FILES" -size 256KiB -dropped -warm)
	if [[ -n $sampler ]]; then
		kill "$sampler" 2>/dev/null || true
		wait "$sampler" 2>/dev/null || true
		sampler=""
		read -r "R[ctxmemd.rss_kib.$r]" "R[ctxmemd.anon_kib.$r]" "R[ctxmemd.shmem_kib.$r]" <"$work/mem.$r"
	fi
	R[$t.kvwrite.$r]=$(jq '.write.files_per_s' <<<"$j")
	R[$t.kvwrite_p99.$r]=$(jq '.write.p99_us' <<<"$j")
	R[$t.kvdropped.$r]=$(jq '.read_dropped.files_per_s' <<<"$j")
	R[$t.kvdropped_p99.$r]=$(jq '.read_dropped.p99_us' <<<"$j")
	R[$t.kvdropped_resident.$r]=$(jq '.resident_after_drop * 100' <<<"$j")
	R[$t.kvwarm.$r]=$(jq '.read_warm.files_per_s' <<<"$j")
	rm -rf "$dir"
}

# median TARGET METRIC — the median over the rounds ("" if none).
median() {
	local r vals=()
	for ((r = 0; r < ROUNDS; r++)); do
		[[ -n ${R[$1.$2.$r]:-} ]] && vals+=("${R[$1.$2.$r]}")
	done
	((${#vals[@]})) || return 0
	printf '%s\n' "${vals[@]}" | sort -g | awk '{v[NR] = $1} END {
		printf "%.6f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo "fio_bench: tmpfs=$TMPFS_DIR ctxmemd=$MOUNT_DIR loopback=${LOOPBACK_DIR:--} size=$SIZE runtime=${RUNTIME}s direct=$DIRECT kv_files=$FILES rounds=$ROUNDS" >&2
exec {lockfd}>"$LOCK"
for ((r = 0; r < ROUNDS; r++)); do
	order=("${targets[@]:r%${#targets[@]}}" "${targets[@]:0:r%${#targets[@]}}")
	if ! flock -n "$lockfd"; then
		echo "fio_bench: round $((r + 1)): waiting for $LOCK (another benchmark is running)..." >&2
		flock "$lockfd"
	fi
	for t in "${order[@]}"; do
		echo "fio_bench: round $((r + 1))/$ROUNDS: $t" >&2
		bench "$t" "$r"
	done
	flock -u "$lockfd"
done

# row LABEL UNIT METRIC GOAL — one line of the table; GOAL is the issue-12
# target as "tmpfs>=X", "loopback>=X" (ratio) or "p99<X" (µs, ctxmemd).
row() {
	local label=$1 unit=$2 m=$3 goal=${4:-}
	local a b c
	a=$(median tmpfs "$m") b=$(median ctxmemd "$m") c=$(median loopback "$m")
	awk -v l="$label" -v u="$unit" -v a="$a" -v b="$b" -v c="$c" -v g="$goal" -v lower="$([[ $m == *_p99 ]] && echo 1 || echo 0)" '
	function num(x) { return x == "" ? "-" : (x >= 100 ? sprintf("%.0f", x) : sprintf("%.1f", x)) }
	function ratio(x, y) { return (x == "" || y == "" || y == 0) ? "-" : sprintf("%.2fx", x / y) }
	BEGIN {
		verdict = ""
		n = split(g, gs, ",")
		for (i = 1; i <= n; i++) {
			if (gs[i] ~ /^tmpfs>=/)    { x = substr(gs[i], 8) + 0; ok = (a > 0 && b / a >= x) }
			else if (gs[i] ~ /^loopback>=/) { x = substr(gs[i], 11) + 0; if (c == "") continue; ok = (c > 0 && b / c >= x) }
			else if (gs[i] ~ /^p99</)  { x = substr(gs[i], 5) + 0; ok = (b != "" && b < x) }
			verdict = verdict (verdict == "" ? "" : " ") gs[i] (ok ? " ok" : " MISS")
		}
		printf "%-24s %-6s %10s %10s %10s %9s %9s  %s\n", l, u, num(a), num(b), num(c),
			lower ? ratio(a, b) : ratio(b, a), lower ? ratio(c, b) : ratio(b, c), verdict
	}'
}

printf '\nctxmemd vs tmpfs vs go-fuse loopback (passthrough) — medians of %d round(s), %s CPUs, fio SIZE=%s RUNTIME=%ss, KV FILES=%s x 256 KiB\n' \
	"$ROUNDS" "$(nproc)" "$SIZE" "$RUNTIME" "$FILES"
printf '%-24s %-6s %10s %10s %10s %9s %9s  %s\n' job unit tmpfs ctxmemd loopback ctx/tmpfs ctx/loop "issue-12 goal"
row "seq write 256K fsync" MiB/s seqwrite "tmpfs>=0.7"
row "seq read 256K" MiB/s seqread "tmpfs>=0.9"
row "randread 4K QD1" IOPS randread "tmpfs>=0.8"
row "KV write 256K" file/s kvwrite "tmpfs>=0.5,loopback>=1.2"
row "KV write p99" us kvwrite_p99
row "KV read, cache dropped" file/s kvdropped "tmpfs>=0.8"
row "KV read dropped p99" us kvdropped_p99 "p99<100"
row "KV read, cache warm" file/s kvwarm
echo "(p99 rows: lower is better, their ratios are tmpfs/ctxmemd and loopback/ctxmemd, so >1x still means ctxmemd is faster)"
# resident TARGET — median % of the KV files' pages still cached after the fadvise.
resident() {
	median "$1" kvdropped_resident | awk 'NF { if ($1 < 0) print "n/a"; else printf "%.0f%%\n", $1; f = 1 } END { if (!f) print "-" }'
}
echo "KV files' pages still in the page cache after the fadvise (mincore): tmpfs $(resident tmpfs), ctxmemd $(resident ctxmemd), loopback $(resident loopback)"
if [[ -n $LOOPBACK_DIR ]]; then
	pt=${PASSTHROUGH:-unknown}
	cpu=$(median loopback read_cpu_ms) mib=$(median loopback randread_bytes)
	printf 'loopback passthrough: %s' "$pt"
	[[ -n ${PASSTHROUGH_WHY:-} ]] && printf ' (%s)' "$PASSTHROUGH_WHY"
	[[ -n $cpu ]] && printf '; the benchmarked loopback used %.0f ms of CPU during its seqread + randread jobs (%s of file + %.0f MiB of 4K reads)' \
		"$cpu" "$SIZE" "$(awk -v b="$mib" 'BEGIN {print b / 1048576}')"
	echo
fi
if [[ -n $DAEMON_PID && -r /proc/$DAEMON_PID/status ]]; then
	hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$DAEMON_PID/status")
	mib() { median ctxmemd "$1" | awk '{print int($1 / 1024)}'; }
	printf 'ctxmemd memory (--dram %s): peak RSS (VmHWM) %d MiB over the whole run; sampled every 50 ms during the KV job: VmRSS up to %s MiB (RssAnon %s, RssShmem %s)\n' \
		"$DRAM" $((hwm / 1024)) "$(mib rss_kib)" "$(mib anon_kib)" "$(mib shmem_kib)"
fi
if [[ -n $ADMIN_SOCK && -S $ADMIN_SOCK ]] && st=$(./bin/ctxmemd status --admin "$ADMIN_SOCK" --json 2>/dev/null); then
	jq -r '.stats | "ctxmemd G2 residency (daemon counters since start): bytes read from " +
		([(.byte_hits // {}) | to_entries[] | "\(.key) \(.value / 1048576 | floor) MiB"] | join(", ")) +
		"; block misses \(.block_misses); evictions " + ((.evictions // {}) | tostring) +
		(if ([(.byte_hits // {}) | to_entries[] | select(.key != "G2" and .value > 0)] | length) == 0 and ((.evictions.G2 // 0) == 0)
		 then " -> every read was served from G2" else " -> NOT all reads came from G2" end)' <<<"$st"
fi
