#!/usr/bin/env bash
# make bench — every benchmark of the project in one run, each reported
# against a reference measured in the same run (never a fixed threshold):
#
#   1. Go benchmarks: G2 lookup latency (p50/p99 ns) and write, placement
#      decisions per second, G3 vs plain pwrite/pread, G4 vs plain files.
#   2. The placement policy on the full Mooncake trace vs LRU and OPT.
#   3. fio through a live mount vs the same jobs on tmpfs (fio_bench.sh).
#   4. The full conversation-trace replay through the mount, and the
#      daemon's peak RSS against its G2 budget.
#   5. NBD against nbdkit memory (nbd/bench/nbd_bench.sh).
#   6. G4 on S3 against a bare minio-go loop (needs versitygw).
#   7. Control plane (sidecar/bench): one scheduler and 64 simulated hosts
#      on a real NATS server (reports, commands and acks per second, CPU of
#      scheduler, server and hosts), and the CPU of one report on a host
#      tracking 1,000,000 files (goal: < 2 % of a core at a 1 s interval).
#   8. G3.5 shared pool: pool records vs raw O_DIRECT (fabric/pool), index
#      lookup (fabric/poolkv), and end to end (tests/bench_pool_test.go):
#      two daemons on one pool file, NATS and a scheduler; share (pool
#      write) and read through FUSE vs raw O_DIRECT writes/reads of the
#      same bytes on the same disk, import latency, wanted -> readable.
#
# Environment: DRAM (G2 budget, default 2GiB), G3_SIZE (default 8GiB),
# REPLAY_BLOCK_BYTES (default 64KiB), REPLAY_REQUESTS (default all),
# TRACE (trace file, plain or gzip; default the bundled Mooncake trace),
# SIZE/RUNTIME/FILES (fio_bench.sh), CP_INTERVALS (control-plane report
# intervals, default 1s,200ms,50ms).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
DRAM=${DRAM:-2GiB}
G3_SIZE=${G3_SIZE:-8GiB}
REPLAY_BLOCK_BYTES=${REPLAY_BLOCK_BYTES:-65536}
REPLAY_REQUESTS=${REPLAY_REQUESTS:-0}
trace_args=()
[[ -n ${TRACE:-} ]] && trace_args=(--trace "$TRACE")

section() { printf '\n== %s ==\n' "$*"; }

section "Go benchmarks: G2 (tiering), placement (heat), G3 vs pwrite/pread, G4 vs files"
go test -run '^$' -bench 'G2' -benchtime 2s ./tiering/ 2>&1 | grep -E '^(Benchmark|ok)'
go test -run '^$' -bench . -benchtime 1s ./heat/ 2>&1 | grep -E '^(Benchmark|ok)'
go test -run '^$' -bench . -benchtime 2s ./tiering/g3/ 2>&1 | grep -E '^(Benchmark|ok)'
go test -run '^$' -bench . -benchtime 20x ./tiering/g4/ 2>&1 | grep -E '^(Benchmark|ok)'

section "Placement policy on the full trace (block hit ratio; LRU and OPT are references)"
go run ./cmd/ctxmemd sim "${trace_args[@]}"

section "fio and KV job: mount vs tmpfs"
work=$(mktemp -d /tmp/ctxmem-bench.XXXXXX)
shm=$(mktemp -d /dev/shm/ctxmem-bench.XXXXXX)
pid=""
cleanup() {
	[[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	umount -l "$work/mnt" 2>/dev/null || true
	rm -rf "$work" "$shm"
}
trap cleanup EXIT
make -s build
: > "$work/empty.yaml"
./bin/ctxmemd run --config "$work/empty.yaml" --mount "$work/mnt" --data-dir "$work/data" \
	--dram "$DRAM" --g3-size "$G3_SIZE" --metrics "" >"$work/daemon.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
	[[ $(stat -f -c %T "$work/mnt" 2>/dev/null) == fuseblk || -d $work/mnt/default ]] && break
	sleep 0.1
done
[[ -d $work/mnt/default ]] || { cat "$work/daemon.log"; echo "daemon did not mount" >&2; exit 1; }
bash tests/bench/fio_bench.sh "$work/mnt/default" "$shm"

section "Full trace replay through the mount (block files of $REPLAY_BLOCK_BYTES bytes)"
args=("${trace_args[@]}" --mount "$work/mnt/default" --block-bytes "$REPLAY_BLOCK_BYTES" --quiet)
[[ $REPLAY_REQUESTS != 0 ]] && args+=(--requests "$REPLAY_REQUESTS")
./bin/ctxmemd replay "${args[@]}"
./bin/ctxmemd status --admin "$work/data/admin.sock"

section "Daemon memory: peak RSS vs G2 budget"
hwm_kib=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
rss_kib=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
echo "G2 budget $DRAM; daemon VmRSS $((rss_kib / 1024)) MiB, peak (VmHWM) $((hwm_kib / 1024)) MiB"

section "NBD: ctxmemd vs nbdkit memory (same size, same clients)"
bash nbd/bench/nbd_bench.sh

section "G4 on S3: tier vs bare minio-go on one versitygw, restore latency of an 8 MiB file"
PATH="$(go env GOPATH)/bin:$PATH" go test -run '^$' -bench . -benchtime 50x ./tiering/g4/s3/ 2>&1 | grep -E '^(Benchmark|ok|\s)'

section "Control plane: scheduler under 64 hosts, report cost at 1M files (sidecar/bench)"
PATH="$(go env GOPATH)/bin:$PATH" go run ./sidecar/bench -intervals "${CP_INTERVALS:-1s,200ms,50ms}"

section "G3.5 pool: records vs raw O_DIRECT, index lookup, two daemons end to end (tests/bench_pool_test.go)"
go test -run '^$' -bench 'PoolPut|PoolGet' -benchtime 1s ./fabric/pool/ 2>&1 | grep -E '^(Benchmark|ok)'
go test -run '^$' -bench 'Lookup|HasDir' -benchtime 1s ./fabric/poolkv/ 2>&1 | grep -E '^(Benchmark|ok)'
PATH="$(go env GOPATH)/bin:$PATH" CTXMEM_E2E=1 CTXMEM_BENCH=1 go test -count=1 -run TestBenchPool -v ./tests/
