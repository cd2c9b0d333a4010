# shellcheck shell=bash disable=SC2034  # sets variables for the sourcing script
# targets.sh — sourced by tests/bench/run.sh and tests/bench/fio_bench.sh:
# starts and stops the file-system targets the benchmarks compare.
#
#   start_ctxmemd WORK       ./bin/ctxmemd run on WORK/mnt (data in WORK/data),
#                            --dram $DRAM --g3-size $G3_SIZE $CTXMEMD_FLAGS;
#                            sets CTXMEMD_PID and CTXMEMD_DIR (WORK/mnt/default).
#   start_loopback WORK      go-fuse's example/loopback (built from the module
#                            cache at the version go.mod pins) on WORK/lb over a
#                            fresh directory in /dev/shm; sets LOOPBACK_PID,
#                            LOOPBACK_DIR, LOOPBACK_BIN.
#   probe_passthrough WORK   runs that loopback once more with -debug on a
#                            scratch tmpfs directory, writes and reads 4 MiB
#                            through it, and counts the FUSE requests: sets
#                            PASSTHROUGH (yes/no) and PASSTHROUGH_WHY.
#   stop_targets             kills what was started, unmounts, removes the
#                            /dev/shm directories (safe to call twice).
#
# The example has no passthrough flag: go-fuse turns passthrough on by itself
# for every file whose handle implements FilePassthroughFder (LoopbackFile
# does) when the kernel offers CAP_PASSTHROUGH and the server may register a
# backing file (root). The probe checks that it really happened.
# Needs: root, /dev/fuse, go; the caller's cwd is the repository root.

_targets_pids=()
_targets_mounts=()
_targets_dirs=()

# _wait_mount DIR PID LOG — waits up to 10 s for DIR to become a mount point.
_wait_mount() {
	local dir=$1 pid=$2 log=$3
	for _ in $(seq 100); do
		mountpoint -q "$dir" && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	cat "$log" >&2
	echo "targets: $dir did not mount" >&2
	return 1
}

start_ctxmemd() {
	local work=$1
	[[ -x ./bin/ctxmemd ]] || make -s build
	: >"$work/empty.yaml"
	./bin/ctxmemd run --config "$work/empty.yaml" --mount "$work/mnt" --data-dir "$work/data" \
		--dram "${DRAM:-4GiB}" --g3-size "${G3_SIZE:-8GiB}" --metrics "" ${CTXMEMD_FLAGS:-} >"$work/daemon.log" 2>&1 &
	CTXMEMD_PID=$!
	_targets_pids+=("$CTXMEMD_PID")
	_targets_mounts+=("$work/mnt")
	_wait_mount "$work/mnt" "$CTXMEMD_PID" "$work/daemon.log" || return 1
	for _ in $(seq 100); do [[ -d $work/mnt/default ]] && break; sleep 0.1; done
	[[ -d $work/mnt/default ]] || { cat "$work/daemon.log" >&2; echo "targets: no $work/mnt/default" >&2; return 1; }
	CTXMEMD_DIR=$work/mnt/default
}

_build_loopback() {
	local work=$1
	[[ -x $work/loopback ]] || go build -o "$work/loopback" github.com/hanwen/go-fuse/v2/example/loopback
	LOOPBACK_BIN=$work/loopback
}

start_loopback() {
	local work=$1 src
	_build_loopback "$work"
	src=$(mktemp -d /dev/shm/ctxmem-bench-lbsrc.XXXXXX)
	_targets_dirs+=("$src")
	mkdir -p "$work/lb"
	"$LOOPBACK_BIN" -q "$work/lb" "$src" >"$work/loopback.log" 2>&1 &
	LOOPBACK_PID=$!
	_targets_pids+=("$LOOPBACK_PID")
	_targets_mounts+=("$work/lb")
	_wait_mount "$work/lb" "$LOOPBACK_PID" "$work/loopback.log" || return 1
	LOOPBACK_DIR=$work/lb
}

probe_passthrough() {
	local work=$1 src mnt log pid opens pt reads writes
	_build_loopback "$work"
	src=$(mktemp -d /dev/shm/ctxmem-bench-probe.XXXXXX)
	mnt=$work/probe-mnt log=$work/probe.log
	mkdir -p "$mnt"
	"$LOOPBACK_BIN" -debug "$mnt" "$src" >"$log" 2>&1 &
	pid=$!
	if _wait_mount "$mnt" "$pid" "$log"; then
		dd if=/dev/urandom of="$mnt/probe.bin" bs=1M count=4 conv=fsync status=none
		cat "$mnt/probe.bin" >/dev/null
		cmp -s "$mnt/probe.bin" "$src/probe.bin" || echo "targets: probe: loopback file differs from its source" >&2
	fi
	umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -rf "$src"
	# go-fuse -debug: "rx N: OPCODE ..." per request, "tx N: OK, {Fh 1 backing=1 PASSTHROUGH}" per reply.
	opens=$(grep -cE 'rx [0-9]+: (OPEN|CREATE) ' "$log" || true)
	pt=$(grep -cE 'tx [0-9]+: +OK, .*backing=[0-9]+ PASSTHROUGH' "$log" || true)
	reads=$(grep -cE 'rx [0-9]+: READ ' "$log" || true)
	writes=$(grep -cE 'rx [0-9]+: WRITE ' "$log" || true)
	PASSTHROUGH_WHY="probe: $opens OPEN/CREATE, $pt replied with a backing id + FOPEN_PASSTHROUGH, $reads READ and $writes WRITE requests reached the daemon for 4 MiB written and read"
	if ((pt > 0 && reads == 0 && writes == 0)); then PASSTHROUGH=yes; else PASSTHROUGH=no; fi
}

stop_targets() {
	local p m d
	for p in "${_targets_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${_targets_pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for m in "${_targets_mounts[@]}"; do
		mountpoint -q "$m" 2>/dev/null && { umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; }
	done
	for d in "${_targets_dirs[@]}"; do rm -rf "$d"; done
	_targets_pids=() _targets_mounts=() _targets_dirs=()
}
