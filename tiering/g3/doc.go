// Package g3 is the G3 tier: a log-structured block store on a local NVMe
// directory, implementing tier.Tier.
//
// # Layout
//
// The directory holds fixed-size segment files (Options.SegmentBytes,
// default 32 MiB, preallocated with fallocate) named by a 64-bit id that
// only grows, and a LOCK file (flock; one Store per directory). A segment
// starts with a one-page header carrying its id and a random 64-bit salt,
// then append-only records, each starting on a 4 KiB boundary: a header
// (magic, format version, type, lengths, salt, sequence number, key,
// CRC32C of the payload, one CRC32C per 4 KiB page of payload, CRC32C of
// the header itself) and the payload padded to 4 KiB. format.go has the
// byte layout. The format is this project's own.
//
// Record types: block, tombstone (Delete) and pad (covers a region whose
// write failed or whose header was torn). Sequence numbers are store-wide;
// for one key the record with the highest wins, in memory and on reopen.
//
// # Why per-page checksums
//
// A partial Get reads the header and only the 4 KiB pages its range
// touches, and verifies just those pages; a whole-block Get verifies the
// payload CRC32C (the block checksum of the tier contract). Verifying the
// whole record on every read would make a 4 KiB read of a 4 MiB block
// read 4 MiB. The cost is 4 bytes per page in the header (1 KiB for a
// 1 MiB block, so a 4 MiB block's header takes two pages). Pages are the
// O_DIRECT unit anyway, so partial reads need no extra I/O.
//
// # Reads never see wrong bytes
//
// Get finds (segment, offset, sequence number) in the in-memory index,
// takes a reference on the segment's descriptor (a reclaimed segment's
// file is unlinked but closed only when the last reader lets go, so a
// descriptor is never reused under a reader), reads, and checks that the
// header it read passes its CRC and names the key, sequence number and
// length it wanted. Any mismatch or checksum failure quarantines the key
// (it reads as tier.ErrNotFound from then on, counted in
// Stats.CRCErrors) and returns tier.ErrCorrupt.
//
// # I/O
//
// Open probes O_DIRECT (open + aligned write and read of a scratch file);
// where it works all segment I/O is O_DIRECT with page-aligned buffers from
// a pool, else buffered (Options.NoDirect forces buffered). Put returns
// after its pwrite completes, so an acknowledged block survives a kill -9
// of the process; Sync (fdatasync + directory fsync) makes it survive a
// power cut.
//
// # Recovery
//
// Open scans segments oldest first and rebuilds the index from record
// headers (header-only reads, so start-up does not read every payload).
// Writes land only in the newest segment: roll-over waits for writes in
// flight to the old segment, so only the newest segment can hold torn
// records after a crash. Open verifies every payload in it; a block whose
// payload fails its CRC32C (cut short, or rotted) is treated as a
// tombstone for its key at its sequence number — an older copy of the key
// must not come back, because returning a stale version of a block would
// be wrong bytes, while losing the block is allowed — and its first page
// is rewritten as that tombstone; a torn header page is rewritten as a
// pad. Each Open then appends to a fresh segment, so the repaired segment
// scans cleanly once sealed. In a sealed segment a record header that
// carries the segment's salt but fails its checks is damage: that segment
// and every older one are dropped (Stats.DamagedSegments), because the
// damaged record may have been a tombstone or a newer copy hiding older
// ones, and dropping a prefix of the log never brings a hidden record back.
//
// Deletes are tombstone records. Segments are reclaimed strictly oldest
// first, so a tombstone is never dropped before the records it hides.
//
// # Capacity and reclaim
//
// Options.CapacityBytes bounds the bytes of segment files (live payload +
// headers + garbage). When rolling to a new segment takes the store above
// the high watermark, the oldest segments are reclaimed (FIFO) down to the
// low watermark after the new segment is installed, so other writers keep
// appending meanwhile; if the new segment would exceed CapacityBytes
// itself, reclaim happens first. ENOSPC from the filesystem while creating
// a segment also reclaims the oldest segment and retries; with nothing
// left to reclaim Put returns tier.ErrNoSpace and the store is unchanged.
// Reclaiming a segment first hands its live blocks to the Demoter the core
// attached (SetDemoter, tier.Reclaimer; Options.OnEvict when none is),
// which still read through Get during the call, so the tiering core can
// demote them to G4 (or mark them lost) before they go. While the store's
// live payload is at most Options.CompactLive of CapacityBytes, a
// watermark reclaim first copies the segment's live blocks forward into
// the active segment with their sequence numbers (compaction, as a
// log-structured cleaner does), and only those that do not fit reach
// OnEvict: dead space is freed without demoting live data. Compaction
// stays oldest first, so the tombstone rule above holds.
//
// A reclaimed file is renamed "<id>.spare" and kept open for reuse while
// segments and spares together fit in CapacityBytes (two spares when
// unbounded): the next roll-over renames it to the new id and stamps a
// header with a fresh salt, skipping fallocate, unlink and unwritten-extent
// conversion. A spare is reused only once no reader holds its descriptor;
// records from its previous life carry the old salt, so neither Get nor a
// scan can take them for records of the new segment. The directory's disk
// use therefore tends to CapacityBytes; spares are deleted first when the
// filesystem runs out of space.
//
// # Zero-copy paths
//
// Put writes header, payload and a padded last page with one pwritev; a
// caller buffer that is page-aligned (Go allocates large slices so) is
// written in place, others are copied into a pooled aligned buffer. Get
// reads whole pages straight into the caller's buffer when the range
// starts on a page and the buffer is aligned, and zeroes those bytes again
// if verification fails.
package g3
