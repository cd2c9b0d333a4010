// Package catalog is the metadata service of ctxmemd, below both front
// ends (fusefs, nbd): what names an object of the tiering core, and what
// survives a restart about it.
//
// This first version owns the persisted tree of the FUSE mount: the bbolt
// schema (DB, Record, NSRecord), its write-ahead log (Journal), loading
// at mount (Snapshot) and reconciliation with the store (Reconcile: what
// survives a restart, which objects are orphans), namespace identity
// (Identity) and quota accounting (Quota), and the name service the
// sidecar and admin use (Names: object id ↔ namespace and path, dropping
// a namespace). It also keeps the NBD export map (ExportMap: export name
// → object) and finds its orphans. The in-memory tree that
// answers kernel requests still lives in fusefs, which implements Tree
// for Names; the API is shaped as entry operations (Tree.Child of a
// parent and a name, the journal's per-entry ops) so that a later version
// can keep entries on disk and load them on lookup.
//
// # On-disk format
//
// One bbolt file per mount (see DB) and, next to it, write-ahead log files
// (path.wal.<first seq>, see Journal); the NBD export map is a JSON file
// (ExportFile). The formats are those of fusefs and nbd before this
// package existed, byte for byte: existing data directories keep working.
package catalog
