// Package g4 is ctxmemd's G4 tier: cold KV blocks kept in object storage
// for days (default TTL 72 h) and then expired.
//
// It has three parts, one file group each:
//
//   - ObjectStore (store.go): the pluggable, S3-shaped backend interface —
//     Put/Get/GetRange/Head/Delete/List of '/'-separated names with small
//     string metadata — with sentinel errors ErrNotExist and ErrInvalid and
//     backend failures wrapped as tier.ErrUnavailable. An S3 backend
//     (minio-go) is meant to live in its own package behind it; the
//     storetest subpackage is the conformance suite every backend runs.
//   - Local (local*.go): the embedded default backend on a local
//     directory: atomic, durable puts (temp file in the same directory,
//     fsync, rename, directory fsync), percent-encoded paths that cannot
//     escape the root, metadata inside the object file.
//   - Tier (tier.go, header.go, names.go, index.go, expire.go): a
//     tier.Tier and tier.Expirer over any ObjectStore. Put stores one
//     object per block named <prefix>/<namespace>/<object>/<gen>/<index>,
//     each object a 64-byte header (key, generation, length, CRC32C) plus
//     the namespace and the payload; every read verifies header and
//     payload. Sweeper runs expiry on a timer, and size eviction of a
//     bounded tier (oldest blocks first, evict.go) when it fills, for
//     whoever owns its Run loop.
//   - Packs (pack.go, packname.go): PutPack (tier.Packer, what the core's
//     Sink uses for files) stores a run of consecutive blocks of one
//     object generation as one object of at most PackSize bytes (default
//     16 MiB: about 65 PUTs per GiB of 256 KiB blocks instead of 4096),
//     named <prefix>/<namespace>/<object>/<gen>/p<first>-<count>-<bsize>-
//     <last>-<stamp>, so that a listing alone rebuilds the index. A pack
//     header holds a CRC32C per block: a Get of one member is one ranged
//     GET verified against it (the header read once and cached, with its
//     own CRC), GetBlocks of a run one GET, Gets that walk a pack in
//     order read ahead in growing windows (readahead.go), damage inside
//     one member makes that member alone corrupt. Members die one by one (Delete, a
//     newer copy, corruption) and the object is deleted with the last;
//     expiry and size eviction drop packs whole. Where a listing shows a
//     key in several objects, its own object wins over any pack (PutPack
//     deletes it first), then the pack with the larger stamp. Per-block
//     objects and packs mix in one prefix (older data dirs and buckets
//     keep working; an older build ignores packs).
//   - Request counts (requests.go): every backend call is counted by type
//     (Requests, or the S3 store's own HTTP counts), for status and
//     metrics.
//
// Every backend call the tier makes carries a deadline (TierOptions.Timeout,
// default 2 s); a backend that does not answer in time, or reports itself
// gone, yields an error wrapping tier.ErrUnavailable.
package g4
