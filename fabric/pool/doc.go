// Package pool is the on-disk layout and I/O of a G3.5 shared pool: one
// block device (an NVMe-oF namespace attached on every host; in tests a
// plain file) that ctxmemd processes on several hosts read and write at
// the same time with no cross-host lock other than extent leases handed
// out by the control bus (DESIGN.md "Fabric (G3.5)"). The format is this
// project's own; all integers are little-endian.
//
// # Layout
//
//	[0, 4 KiB)            superblock (superblock.go): magic, version, pool
//	                      id, extent size and count, device size, created,
//	                      CRC32C
//	[4 KiB, 1 MiB)        zero
//	[1 MiB + e·E, +E)     extent e, E = extent size (power of two ≥ 1 MiB,
//	                      default 64 MiB), e = 0..count-1
//
// An extent starts with a 4 KiB extent header (extent.go: pool id,
// extent, the epoch of the lease it was last stamped under, holder host,
// CRC32C). Records follow one another after it, each on a 4 KiB boundary:
// a 4 KiB header sector (record.go: pool id, own offset, extent, lease
// epoch, key, length, payload CRC32C, writer host, header CRC32C), then
// the payload padded with zeros to 4 KiB.
//
// # Who writes where
//
// A host writes only inside extents it holds a lease on (Lease, Leaser;
// MemLeases is the in-memory leaser). A Writer bump-allocates records in
// its current extent, acquires a new one when it is full, and renews the
// leases of all its extents (full ones keep published blocks) in a loop
// it owns. Every lease of an extent has a new, larger epoch. A Writer
// stamps the extent header with its epoch before its first record there,
// and every record carries the epoch it was written under, so once an
// extent is leased again (or reclaimed: Pool.Reclaim zeroes the extent
// header) every Location of its earlier life misses, even where the old
// record is still intact on disk.
//
// # Publish after verify
//
// Writer.Put returns a Location only after the record was written, read
// back and compared, and while its lease is still live. The caller
// publishes the Location to the global index only after that, so readers
// on other hosts are never sent to an incomplete record.
//
// # Readers never see wrong bytes
//
// Reader.Get reads the whole record into its own aligned buffer and
// checks, in order: magic, header CRC32C, pool id, offset, extent, epoch,
// key (namespace, object, index, generation), length, payload CRC32C;
// then it reads the extent header and checks that it still carries the
// Location's epoch; only then does it copy to the caller. Reading the
// extent header after the record, seqlock-style, means a record read that
// overlapped a new holder's writes is always detected, not only with the
// CRC's 1 - 2^-32. A stale Location (the extent was reused or reclaimed)
// is tier.ErrNotFound; a checksum failure in an extent still stamped with
// the Location's epoch (torn write, damage) is tier.ErrCorrupt. Both are
// misses to the tiering core.
//
// What the format cannot prevent, and why it is safe: a write of a host
// whose lease has lapsed (a stalled pwrite that lands late, or clock skew
// beyond the writer's safety margin and the leaser's grace period) may
// overwrite a newer holder's records. Those records then fail their key,
// epoch or CRC checks and read as misses: blocks are lost, never mixed up.
//
// # I/O
//
// The device is opened with O_DIRECT and all I/O uses 4 KiB-aligned
// buffers, offsets and lengths, so other hosts' writes are seen and the
// page cache holds no second copy. Where the file system refuses O_DIRECT
// (EINVAL at open or on an aligned read) the pool falls back to buffered
// I/O, which is correct only while every reader and writer shares one
// page cache (tests, single host); Pool.Mode reports which is in use.
package pool
