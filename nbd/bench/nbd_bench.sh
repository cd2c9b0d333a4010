#!/usr/bin/env bash
# nbd_bench.sh — ctxmemd's NBD server against `nbdkit memory`, side by side
# in one run, same export size, same unix-socket transport, same clients.
#
#   bash nbd/bench/nbd_bench.sh            # from the repo root
#   SIZE=1G RUNTIME=10 COPY=512M bash nbd/bench/nbd_bench.sh
#
# Workloads (each run on both servers, interleaved, ctxmemd first):
#   fio --ioengine=nbd: 4 KiB randread and randwrite at iodepth 1 and 16,
#   256 KiB sequential read and write (iodepth 4); every fio job works on
#   the first COPY bytes, which the nbdcopy-in step filled with random data
#   (so reads hit written blocks, not holes);
#   nbdcopy of COPY bytes into the export (from a file in /dev/shm) and out
#   of it (to null:).
# Prints IOPS or MiB/s per server and the ratio ctxmemd/nbdkit.
#
# ctxmemd runs as cmd/nbdserve: the NBD server over a tiering store with
# G2 = G2 bytes of DRAM and G3 segments under a temporary directory, and
# nothing else. `ctxmemd run --nbd` serves the same export but also mounts
# the FUSE file system (root, /dev/fuse) and runs the whole daemon; the
# benchmark wants the NBD path alone, without root, and a CPU profile of
# it. Extra nbdserve flags: NBDSERVE_ARGS. A CPU profile of the
# ctxmemd server: PROFILE=/path/cpu.pprof.
# Needs: go, fio, nbdkit, libnbd-bin (nbdcopy), python3.
set -euo pipefail

SIZE=${SIZE:-1G}
COPY=${COPY:-512M}
RUNTIME=${RUNTIME:-10}
G2=${G2:-2G}
NBDSERVE_ARGS=${NBDSERVE_ARGS:-}
PROFILE=${PROFILE:-}

for t in fio nbdkit nbdcopy go python3; do
	command -v "$t" >/dev/null || { echo "nbd_bench: $t not found (apt-get install fio nbdkit libnbd-bin)" >&2; exit 2; }
done

bytes() { numfmt --from=iec "$1"; }
SIZE_B=$(bytes "$SIZE")
COPY_B=$(bytes "$COPY")
G2_B=$(bytes "$G2")

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d /tmp/nbd_bench.XXXXXX)
SHM=$(mktemp -d /dev/shm/nbd_bench.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK" "$SHM"
}
trap cleanup EXIT

echo "building nbdserve..." >&2
(cd "$ROOT" && go build -o "$WORK/nbdserve" ./cmd/nbdserve)

CTX_SOCK=$WORK/ctxmemd.sock
KIT_SOCK=$WORK/nbdkit.sock
prof=()
[ -n "$PROFILE" ] && prof=(-cpuprofile "$PROFILE")
# shellcheck disable=SC2086
"$WORK/nbdserve" -listen "unix://$CTX_SOCK" -dir "$WORK/data" -size "$SIZE_B" -g2 "$G2_B" "${prof[@]}" $NBDSERVE_ARGS 2>"$WORK/nbdserve.log" &
PIDS+=($!)
nbdkit -f -U "$KIT_SOCK" memory "$SIZE_B" &
PIDS+=($!)
for s in "$CTX_SOCK" "$KIT_SOCK"; do
	for _ in $(seq 100); do [ -S "$s" ] && break; sleep 0.1; done
	[ -S "$s" ] || { echo "server socket $s did not appear" >&2; cat "$WORK/nbdserve.log" >&2; exit 1; }
done
CTX_URI="nbd+unix:///default?socket=$CTX_SOCK"
KIT_URI="nbd+unix:///?socket=$KIT_SOCK"

echo "generating $COPY of random data..." >&2
head -c "$COPY_B" /dev/urandom >"$SHM/in.bin"

declare -A RES

# copy_mibs LABEL SRC DST: runs nbdcopy, records MiB/s.
copy_mibs() {
	local label=$1 src=$2 dst=$3 t0 t1
	t0=$(date +%s.%N)
	nbdcopy --flush "$src" "$dst"
	t1=$(date +%s.%N)
	RES[$label]=$(python3 -c "print(round($COPY_B/1048576/($t1-$t0), 1))")
}

# fio_run LABEL URI RW BS IODEPTH: records IOPS (4k) or MiB/s (256k).
fio_run() {
	local label=$1 uri=$2 rw=$3 bs=$4 qd=$5 out
	out=$(fio --name=b --ioengine=nbd --uri="$uri" --rw="$rw" --bs="$bs" --iodepth="$qd" \
		--size="$COPY_B" --time_based --runtime="$RUNTIME" --ramp_time=1 \
		--randrepeat=0 --norandommap --output-format=json)
	RES[$label]=$(python3 -c '
import json, sys
s = sys.stdin.read()
j = json.loads(s[s.index("{"):])["jobs"][0]  # fio prints "fio: connected..." first
d = j["read"] if j["read"]["io_bytes"] else j["write"]
print(round(d["iops"]) if sys.argv[1] == "iops" else round(d["bw_bytes"] / 1048576, 1))
' "$([ "$bs" = 4k ] && echo iops || echo mibs)" <<<"$out")
}

echo "nbdcopy in/out ($COPY)..." >&2
copy_mibs ctx:copy-in "$SHM/in.bin" "$CTX_URI"
copy_mibs kit:copy-in "$SHM/in.bin" "$KIT_URI"
copy_mibs ctx:copy-out "$CTX_URI" null:
copy_mibs kit:copy-out "$KIT_URI" null:

TESTS=(
	"randread-4k-qd1 randread 4k 1"
	"randread-4k-qd16 randread 4k 16"
	"randwrite-4k-qd1 randwrite 4k 1"
	"randwrite-4k-qd16 randwrite 4k 16"
	"read-256k-seq read 256k 4"
	"write-256k-seq write 256k 4"
)
for t in "${TESTS[@]}"; do
	read -r name rw bs qd <<<"$t"
	echo "fio $name (${RUNTIME}s each)..." >&2
	fio_run "ctx:$name" "$CTX_URI" "$rw" "$bs" "$qd"
	fio_run "kit:$name" "$KIT_URI" "$rw" "$bs" "$qd"
done

printf '\nctxmemd NBD (nbdserve, G2 %s, export %s) vs nbdkit memory %s; %s CPUs\n' "$G2" "$SIZE" "$SIZE" "$(nproc)"
printf '%-20s %12s %12s %8s\n' test ctxmemd nbdkit ratio
for t in "copy-in $COPY MiB/s" "copy-out $COPY MiB/s" "${TESTS[@]}"; do
	read -r name _ bs _ <<<"$t"
	unit=IOPS
	case $name in copy-*) unit=MiB/s ;; esac
	[ "$bs" = 256k ] && unit=MiB/s
	c=${RES[ctx:$name]} k=${RES[kit:$name]}
	printf '%-20s %12s %12s %7.2fx  %s\n' "$name" "$c" "$k" "$(python3 -c "print($c/$k)")" "$unit"
done
