#!/usr/bin/env bash
# fio_bench.sh — compare a ctxmemd mount with a native tmpfs in one run.
#
# Usage: tests/bench/fio_bench.sh MOUNT_DIR TMPFS_DIR
#   MOUNT_DIR  a directory inside a ctxmemd mount (e.g. /mnt/ctxmem/default)
#   TMPFS_DIR  a directory on tmpfs (e.g. /dev/shm)
#
# Runs, on both, the same jobs in a fresh subdirectory (removed afterwards):
#   seqwrite  256 KiB sequential write of SIZE (end_fsync)
#   seqread   256 KiB sequential read of that file
#   randread  4 KiB random reads of that file for RUNTIME seconds
#   kv        create+write+close FILES files of 256 KiB, then open+read+close
#             them in random order (tests/bench/kvjob: per-file p50/p99, MiB/s)
# and prints each figure for both targets and the ratio mount/tmpfs
# (bandwidth and IOPS: higher is better; latency: lower is better).
#
# Environment: SIZE (fio file size, default 1G), RUNTIME (randread seconds,
# default 10), DIRECT (fio direct=, default 0), FILES (kv files, default 2000).
# Needs fio, jq and go (for kvjob). Exit status 0 when every job ran.
set -euo pipefail

if [[ $# -ne 2 ]]; then
	sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
fi
MOUNT_DIR=$1
TMPFS_DIR=$2
SIZE=${SIZE:-1G}
RUNTIME=${RUNTIME:-10}
DIRECT=${DIRECT:-0}
FILES=${FILES:-2000}

for tool in fio jq go; do
	command -v "$tool" >/dev/null || { echo "fio_bench: $tool is not installed" >&2; exit 2; }
done
for d in "$MOUNT_DIR" "$TMPFS_DIR"; do
	[[ -d $d ]] || { echo "fio_bench: $d is not a directory" >&2; exit 2; }
done
if [[ $(stat -f -c %T "$TMPFS_DIR") != tmpfs ]]; then
	echo "fio_bench: warning: $TMPFS_DIR is $(stat -f -c %T "$TMPFS_DIR"), not tmpfs" >&2
fi

here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"; rm -rf "${cleanup[@]:-/nonexistent}"' EXIT
cleanup=()
(cd "$here/../.." && go build -o "$work/kvjob" ./tests/bench/kvjob)

# fio_job NAME DIR ARGS... — runs one fio job and prints its JSON.
fio_job() {
	local name=$1 dir=$2
	shift 2
	fio --name="$name" --directory="$dir" --filename=bench.dat --size="$SIZE" \
		--ioengine=psync --direct="$DIRECT" --output-format=json "$@"
}

declare -A R
# bench TARGET DIR — fills R[TARGET.metric].
bench() {
	local t=$1 dir=$2/fio-bench-$$
	mkdir -p "$dir"
	cleanup+=("$dir")
	local j
	j=$(fio_job seqwrite "$dir" --rw=write --bs=256k --end_fsync=1)
	R[$t.seqwrite_MiBps]=$(jq '.jobs[0].write.bw_bytes / 1048576' <<<"$j")
	j=$(fio_job seqread "$dir" --rw=read --bs=256k)
	R[$t.seqread_MiBps]=$(jq '.jobs[0].read.bw_bytes / 1048576' <<<"$j")
	j=$(fio_job randread "$dir" --rw=randread --bs=4k --time_based --runtime="$RUNTIME")
	R[$t.randread4k_iops]=$(jq '.jobs[0].read.iops' <<<"$j")
	R[$t.randread4k_p99_us]=$(jq '.jobs[0].read.clat_ns.percentile["99.000000"] / 1000' <<<"$j")
	rm -f "$dir/bench.dat"
	j=$("$work/kvjob" -dir "$dir/kv" -files "$FILES" -size 256KiB)
	R[$t.kv_write_MiBps]=$(jq '.write.mib_per_s' <<<"$j")
	R[$t.kv_write_p50_us]=$(jq '.write.p50_us' <<<"$j")
	R[$t.kv_write_p99_us]=$(jq '.write.p99_us' <<<"$j")
	R[$t.kv_read_MiBps]=$(jq '.read.mib_per_s' <<<"$j")
	R[$t.kv_read_p50_us]=$(jq '.read.p50_us' <<<"$j")
	R[$t.kv_read_p99_us]=$(jq '.read.p99_us' <<<"$j")
	rm -rf "$dir"
}

echo "fio_bench: mount=$MOUNT_DIR tmpfs=$TMPFS_DIR size=$SIZE runtime=${RUNTIME}s direct=$DIRECT kv_files=$FILES" >&2
bench mount "$MOUNT_DIR"
bench tmpfs "$TMPFS_DIR"

printf '%-20s %14s %14s %10s\n' metric mount tmpfs mount/tmpfs
for m in seqwrite_MiBps seqread_MiBps randread4k_iops randread4k_p99_us \
	kv_write_MiBps kv_write_p50_us kv_write_p99_us kv_read_MiBps kv_read_p50_us kv_read_p99_us; do
	a=${R[mount.$m]} b=${R[tmpfs.$m]}
	awk -v m="$m" -v a="$a" -v b="$b" 'BEGIN {
		r = (b > 0) ? sprintf("%.3f", a / b) : "n/a"
		printf "%-20s %14.1f %14.1f %10s\n", m, a, b, r
	}'
done
