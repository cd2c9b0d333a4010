#!/usr/bin/env bash
# make bench — every benchmark of the project in one run, each reported
# against a reference measured in the same run (never a fixed threshold):
#
#   1. Go benchmarks: G2 lookup latency (p50/p99 ns) and write, placement
#      decisions per second, G3 vs plain pwrite/pread, G4 vs plain files.
#   2. The placement policy on the full Mooncake trace vs LRU and OPT.
#   3. fio and the KV job (tests/bench/fio_bench.sh) on tmpfs, the ctxmemd
#      mount and go-fuse's loopback example over tmpfs with passthrough,
#      interleaved rounds, one table of medians and ratios (issue 12).
#   4. The full conversation-trace replay through the mount, and the
#      daemon's peak RSS against its G2 budget.
#   5. NBD against nbdkit memory (nbd/bench/nbd_bench.sh).
#   6. G4 on S3 against a bare minio-go loop (needs versitygw).
#   7. Control plane (cmd/ctxmem-controlplane-bench): one scheduler and 64 simulated hosts
#      on a real NATS server (reports, commands and acks per second, CPU of
#      scheduler, server and hosts), and the CPU of one report on a host
#      tracking 1,000,000 files (goal: < 2 % of a core at a 1 s interval).
#   8. G3.5 shared pool: pool records vs raw O_DIRECT (fabric/pool), index
#      lookup (fabric/poolkv), and end to end (tests/bench_pool_test.go):
#      two daemons on one pool file, NATS and a scheduler; share (pool
#      write) and read through FUSE vs raw O_DIRECT writes/reads of the
#      same bytes on the same disk, import latency, wanted -> readable.
#   9. Metadata at scale (issue 17, tests/bench/meta_bench.sh): META_FILES
#      (default 1,000,000; QUICK=1: 100,000) files of 4 KiB created through
#      the mount by parallel writers, G2 64 MiB; daemon RSS and live heap per
#      file, metadata on disk per file, ls -f of a big directory, restart to
#      first stat and to reconciled, create files/s against tmpfs.
#
# Environment: DRAM (G2 budget, default 4GiB), G3_SIZE (default 8GiB),
# REPLAY_BLOCK_BYTES (default 64KiB), REPLAY_REQUESTS (default all),
# TRACE (trace file, plain or gzip; default the bundled Mooncake trace),
# SIZE/RUNTIME/FILES/ROUNDS (fio_bench.sh), NBD_SIZE/NBD_COPY/NBD_RUNTIME
# (nbd_bench.sh's SIZE/COPY/RUNTIME), CP_INTERVALS (control-plane report
# intervals, default 1s,200ms,50ms).
# QUICK=1: short runs to iterate (fio_bench SIZE=256M RUNTIME=3 FILES=500
# ROUNDS=1; NBD 256M export, 128M copied, 3 s per job).
# BENCH_ONLY=fio,nbd (comma list of go, sim, fio, replay, memory, nbd, s3,
# cp, pool, meta): only those sections.
# Every measuring section runs under flock /tmp/ctxmem-bench.lock (fio_bench
# takes it per round), so two benchmark runs on one machine never overlap.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
DRAM=${DRAM:-4GiB}
G3_SIZE=${G3_SIZE:-8GiB}
QUICK=${QUICK:-0}
BENCH_ONLY=${BENCH_ONLY:-}
LOCK=/tmp/ctxmem-bench.lock
REPLAY_BLOCK_BYTES=${REPLAY_BLOCK_BYTES:-65536}
REPLAY_REQUESTS=${REPLAY_REQUESTS:-0}
trace_args=()
[[ -n ${TRACE:-} ]] && trace_args=(--trace "$TRACE")

section() { printf '\n== %s ==\n' "$*"; }
# want SECTION — whether BENCH_ONLY (empty: all) selects it.
want() { [[ -z $BENCH_ONLY || ,$BENCH_ONLY, == *,$1,* ]]; }
# locked CMD... — runs CMD holding the benchmark lock.
locked() { flock "$LOCK" "$@"; }

if want go; then
	section "Go benchmarks: G2 (tiering), placement (heat), G3 vs pwrite/pread, G4 vs files"
	locked go test -run '^$' -bench 'G2' -benchtime 2s ./tiering/ 2>&1 | grep -E '^(Benchmark|ok)'
	locked go test -run '^$' -bench . -benchtime 1s ./heat/ 2>&1 | grep -E '^(Benchmark|ok)'
	locked go test -run '^$' -bench . -benchtime 2s ./tiering/g3/ 2>&1 | grep -E '^(Benchmark|ok)'
	locked go test -run '^$' -bench . -benchtime 20x ./tiering/g4/ 2>&1 | grep -E '^(Benchmark|ok)'
fi

if want sim; then
	section "Placement policy on the full trace (block hit ratio; LRU and OPT are references)"
	go run ./cmd/ctxmemd sim "${trace_args[@]}"
fi

# shellcheck source=tests/bench/targets.sh
. tests/bench/targets.sh
work=$(mktemp -d /tmp/ctxmem-bench.XXXXXX)
shm=$(mktemp -d /dev/shm/ctxmem-bench.XXXXXX)
cleanup() {
	stop_targets
	rm -rf "$work" "$shm"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
pid=""
if want fio || want replay || want memory; then
	make -s build
	start_ctxmemd "$work"
	pid=$CTXMEMD_PID
fi

if want fio; then
	section "fio and KV job: tmpfs vs ctxmemd mount vs go-fuse loopback (passthrough)"
	start_loopback "$work"
	probe_passthrough "$work"
	[[ $PASSTHROUGH == yes ]] || echo "warning: the loopback's passthrough is not active: $PASSTHROUGH_WHY" >&2
	QUICK=$QUICK DRAM=$DRAM G3_SIZE=$G3_SIZE DAEMON_PID=$pid ADMIN_SOCK=$work/data/admin.sock \
		LOOPBACK_PID=$LOOPBACK_PID PASSTHROUGH=$PASSTHROUGH PASSTHROUGH_WHY=$PASSTHROUGH_WHY \
		bash tests/bench/fio_bench.sh "$CTXMEMD_DIR" "$shm" "$LOOPBACK_DIR"
fi

if want replay; then
	section "Full trace replay through the mount (block files of $REPLAY_BLOCK_BYTES bytes)"
	args=("${trace_args[@]}" --mount "$CTXMEMD_DIR" --block-bytes "$REPLAY_BLOCK_BYTES" --quiet)
	[[ $REPLAY_REQUESTS != 0 ]] && args+=(--requests "$REPLAY_REQUESTS")
	locked ./bin/ctxmemd replay "${args[@]}"
	./bin/ctxmemd status --admin "$work/data/admin.sock"
fi

if want memory; then
	section "Daemon memory: peak RSS vs G2 budget"
	hwm_kib=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
	rss_kib=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
	echo "G2 budget $DRAM; daemon VmRSS $((rss_kib / 1024)) MiB, peak (VmHWM) $((hwm_kib / 1024)) MiB"
fi

if want nbd; then
	section "NBD: ctxmemd vs nbdkit memory (same size, same clients)"
	nbd_env=(SIZE="${NBD_SIZE:-1G}" COPY="${NBD_COPY:-512M}" RUNTIME="${NBD_RUNTIME:-10}")
	[[ $QUICK == 1 ]] && nbd_env=(SIZE="${NBD_SIZE:-256M}" COPY="${NBD_COPY:-128M}" RUNTIME="${NBD_RUNTIME:-3}")
	locked env "${nbd_env[@]}" bash nbd/bench/nbd_bench.sh
fi

if want s3; then
	section "G4 on S3: tier vs bare minio-go on one versitygw, restore latency of an 8 MiB file"
	PATH="$(go env GOPATH)/bin:$PATH" locked go test -run '^$' -bench 'BenchmarkThroughput|BenchmarkRestoreLayouts' -benchtime 50x ./tiering/g4/s3/ 2>&1 | grep -E '^(Benchmark|ok|\s)'
	section "G4 packs vs one object per block on one versitygw (issue 15): PUTs/GiB, 8 MiB file restored through the core, one 256 KiB block, interleaved rounds"
	pack_env=()
	[[ $QUICK == 1 ]] && pack_env=(CTXMEM_PACK_BENCH_MIB=256 CTXMEM_PACK_BENCH_ROUNDS=2)
	# Twice: versitygw's default read buffer (1 MiB, allocated per ranged
	# GET), then 64 KiB (package s3test, CTXMEM_VERSITYGW_IO_BUFFER).
	for iobuf in "" 65536; do
		PATH="$(go env GOPATH)/bin:$PATH" locked env "${pack_env[@]}" CTXMEM_VERSITYGW_IO_BUFFER=$iobuf go test -count=1 -run '^$' -bench BenchmarkPackedSink -benchtime 1x -v ./tiering/g4/s3/ 2>&1 | grep -E '^(ok|FAIL|\s+pack_bench_test)'
	done
fi

if want cp; then
	section "Control plane: scheduler under 64 hosts, report cost at 1M files (cmd/ctxmem-controlplane-bench)"
	PATH="$(go env GOPATH)/bin:$PATH" locked go run ./cmd/ctxmem-controlplane-bench -intervals "${CP_INTERVALS:-1s,200ms,50ms}"
fi

if want pool; then
	section "G3.5 pool: records vs raw O_DIRECT, index lookup, two daemons end to end (tests/bench_pool_test.go)"
	locked go test -run '^$' -bench 'PoolPut|PoolGet' -benchtime 1s ./fabric/pool/ 2>&1 | grep -E '^(Benchmark|ok)'
	locked go test -run '^$' -bench 'Lookup|HasDir' -benchtime 1s ./fabric/poolkv/ 2>&1 | grep -E '^(Benchmark|ok)'
	PATH="$(go env GOPATH)/bin:$PATH" CTXMEM_E2E=1 CTXMEM_BENCH=1 locked go test -tags bench -count=1 -run TestBenchPool -v ./tests/
fi

if want meta; then
	section "Metadata at scale: RSS and disk per file, ls -f, restart, create vs tmpfs (tests/bench/meta_bench.sh)"
	make -s build
	QUICK=$QUICK bash tests/bench/meta_bench.sh
fi
