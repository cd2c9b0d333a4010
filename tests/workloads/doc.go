// Package workloads replays, at reduced and parameterised sizes, the file I/O
// that real inference engines perform on a KV-cache directory, and checks
// every invariant those engines rely on. The five workloads and their checks
// are specified in the engine notes (ENGINES.md, "Replayable workloads"; a
// design document kept outside this repository):
//
//   - RunW1: SGLang HiCacheFile — flat directory, temp file + rename over the
//     final name, 2 threads per rank, shared (MLA-style) keys written by
//     several ranks at once, an LRU evictor, a concurrent checker that stats
//     and reads final names while writers run.
//   - RunW2: LMCache LocalDisk — in-place puts (buffered O_TRUNC or O_DIRECT
//     without O_TRUNC), O_DIRECT gets in one syscall, synchronous eviction,
//     same-size overwrite, reads racing unlinks.
//   - RunW3: vLLM FS tier / llm-d — deep directory tree with mkdir -p races,
//     O_EXCL temp files, readv and tail reads, utimensat(atime only), an
//     atime-ordered evictor.
//   - RunW4: NIXL POSIX — 256 buckets of _k/_v files written and read with
//     Linux native AIO (raw io_setup/io_submit/io_getevents) on O_DIRECT
//     descriptors, misaligned-I/O probes, overwrite without truncation, an
//     mtime-ordered cleaner.
//   - RunW5: big-file slots (Dynamo KVBM, HF3FS, TRT-LLM V2) — mkstemp,
//     F_SETFL O_DIRECT, fallocate, sparse files, O_TMPFILE, concurrent
//     non-overlapping slot writes by AIO and by threads, slot reuse, space
//     reclaimed after the last close of an unlinked file.
//
// Every byte written is a pure function of (object key, generation, byte
// offset) (see Fill), so every read is verified without keeping the data.
// A check that fails is counted in Report.CheckFailures and described in the
// returned error; a workload keeps running after a failed check so one run
// shows every broken invariant (up to Params.MaxMessages messages).
//
// The functions run against any directory: the package's own tests run them
// on ext4 and tmpfs to validate the workloads, and the end-to-end tests run
// them on a ctxmemd FUSE mount.
package workloads
