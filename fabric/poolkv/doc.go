// Package poolkv is the multi-host control-bus side of the G3.5 shared pool
// (DESIGN.md "Fabric (G3.5)", "Control loop"): extent leases and the global
// index of pooled files, each kept in a JetStream key-value bucket of the
// cluster, so that hosts and scheduler replicas share them without any
// other coordination.
//
// # Buckets
//
// EnsureBuckets creates, per cluster, "ctxmem_<cluster>_pool_leases" and
// "ctxmem_<cluster>_pool_index" (history 1, file storage, no TTL).
//
// Leases bucket: key "extent.<n>" (n decimal, 0..extents-1), value a
// MessagePack leaseValue {v, h: holder host, x: expires unix ns, e: epoch}.
// A lease is taken with a compare-and-set write (Create for a key never
// used or deleted, Update at the observed revision for an expired one), so
// two hosts never both win one extent. The lease epoch is the KV revision
// of that acquiring write: revisions are the bucket stream's sequence
// numbers, strictly increasing over the whole bucket, which satisfies
// pool.Lease's epoch rule. The acquiring write cannot know its own
// revision, so it stores e = 0 meaning "the epoch is this entry's
// revision"; every renewal stores the epoch explicitly.
//
// Index bucket: key "f.<first 32 hex digits of SHA-256(namespace, 0x00,
// path)>", value a MessagePack FileEntry (see wire.go for field names).
// Every host keeps the whole index in memory, kept current by a KV watcher
// (Index.Run), so lookups on the FUSE path never wait on the bus.
//
// Caveat: deleting and recreating the leases bucket restarts revisions
// (epochs) at 1. Do that only together with reformatting the pool, or old
// records could carry epochs that new leases hand out again.
//
// All values are MessagePack (github.com/vmihailenco/msgpack/v5) with
// short field names and a schema version v, as in package sidecar/msg;
// values of an unknown version or that do not decode are skipped and
// logged, never trusted.
package poolkv
