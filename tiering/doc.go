// Package tiering is ctxmemd's tiering core: the block store every front
// end (FUSE files, NBD exports) calls.
//
// An object is split into blocks of its namespace block size. Every write
// lands in G2 (DRAM) and is visible on return; write-back goroutines copy
// dirty blocks down to G3 (local NVMe segments, package tiering/g3), or to
// G4 (object storage, package tiering/g4) when G3 is down, full or fails
// the put, or is above its high watermark and admission predicts no reuse
// (putLower, admitG3; without G4, G3 takes every block). The shared pool G3.5 (fabric/g35) gets copies
// only through Share and Import. When G2 crosses its high watermark an
// evictor removes clean blocks of objects not held (pinned, or open by
// passthrough) in the heat policy's order down to the low watermark; reads
// promote blocks back to G2. When G3 reclaims a segment, its live blocks
// are demoted to G4 first (DemoteFromG3).
//
// Loss, never corruption: a block read from a tier below G2 is verified
// against its CRC32C by the tier; a block that is gone from every tier
// makes its object lost (removed whole, ErrLost to the reader that found
// out, ENOENT after). See meta.go for what survives a crash.
//
// Durability classes: every object has one, chosen at creation
// (CreateOptions.Durability) and persisted with it. DurabilityCache
// objects (KV cache files) may be dropped under pressure and on failures
// that outlast WriteTimeout; DurabilityDevice objects (NBD exports) never
// are: a G2-only store never evicts them, their write-back is retried
// until it succeeds, Flush covers the writes made before it and records
// the object at once, G3 reclaim keeps their blocks when G4 cannot, G4
// retention keeps their blocks (KeyDurability, through the tier.Retainer
// port) and an unclean stop rebuilds them from what reached G3/G4. The
// class alone decides this; an object's Kind is a label for its front end
// (see durability.go).
//
// The rest of this comment is for changing the core: each statement names
// the function that makes it true, so it can be checked against the code.
//
// # Files by job
//
//   - API and object table: api.go (ObjectID, errors, Stats, Errno);
//     store.go (Config, Store, Open, CloseContext, Create, Delete,
//     removeObject, dropBlockLocked, SetPinned, Prestage, Stats);
//     object.go (object, blockState, g2block, busy spans, stale bits).
//   - Metadata and recovery: meta.go (records in bbolt), clean.go (clean
//     records written once idle: scheduleClean, cleanLoop), recover.go
//     (recover, recoverDevice), g4recover.go (starting without G4's
//     listing: recoverG4Loop, reconcileG4), watch.go (watchDataDir).
//   - Data path: io.go (ReadAt, WriteAt, Truncate, Discard, Flush,
//     flushDevice; readBlock, readLower, promoteLocked, writeBlock).
//   - G2 and eviction: g2.go (allocG2, freeG2, waitRoom, admitG2, touch),
//     buffer.go (bufPool: page-aligned mmap buffers), heat.go (placement:
//     heat.Policy for order and admission, heat.Tracker for scores),
//     evict.go (evictLoop, evictBlock, evictObject for a G2-only store, and
//     G3's reclaim port: g3Demoter, DemoteFromG3, demoteOne).
//   - Movement: writeback.go (wbQueue, writeBackLoop, writeBack, putLower,
//     writeBackFailed, endBusyLocked, copyState), coalesce.go (dirty
//     blocks held back: queueDirtyLocked, delayLoop), move.go (Sink,
//     Demote, Residency), share.go (Share, Import, Unshare), prestage.go
//     (prestage accounting; Prestage is in store.go, promote in io.go).
//   - Checking and garbage: fsck.go (Fsck), garbage.go (CollectGarbage,
//     tier listings), gc.go (the delete queue: gc, gcLoop, drainGC, gcOne).
//   - Passthrough: passthrough.go (memory files: OpenPassthrough,
//     ClosePassthrough, adoptLocked, trimMemFiles).
//   - Health: tierhealth.go (putTo, getFrom, SetBypass) over package
//     tiering/health (one Machine per tier below G2: up, degraded, down,
//     bypassed).
//   - Accounting: stats.go (counters), cost.go (restore cost per tier),
//     heat.go, events.go (Subscribe: object events;
//     ObjectRanking), knobs.go (live heat and G3 knobs),
//     loglimit.go (rate-limited warnings); signal.go is the broadcast
//     every waiter uses.
//   - Subpackages: tier (the Tier contract and its optional ports:
//     Demoter, Reclaimer, Relocator, Prober), g3, g4, health, and for
//     tests faulttier and tiertest.
//
// # Block states
//
// A block is o.blocks.get(idx) (a *blockState, "b"; blockmap.go) of object o. Its state is
// encoded by these fields (object.go):
//
//	hole          b == nil: reads as zeros (errAwaitG4 while o.awaitG4)
//	dirty         b.dirty and b.g2 != nil; counted in o.dirty and, by
//	              b.wb.dirtyN bytes, in Store.g2dirty; out of the eviction order
//	held back     dirty, b.queued, b.wb.delayUntil != 0: an entry of
//	              Store.delay, valid while its seq equals b.wb.delaySeq
//	queued        dirty, b.queued, b.wb.delayUntil == 0: in Store.wbQueue
//	busy          o.busy[idx] > 0: a put, delete or fsck read of the key
//	              runs without o.mu (combines with any state above)
//	clean in G2   !b.dirty, b.g2 != nil and b.in holding G3, G3.5 or G4;
//	              in the eviction order unless o.held()
//	below only    b.g2 == nil, b.in holding G3, G3.5 or G4
//	stale         o.stale[idx] has staleG3 or staleG4: that tier may hold
//	              a copy of the key that is not the live bytes, queued for
//	              deletion (gc); o.clean() is false meanwhile
//	lost          no copy left: the object is removed (o.deleted)
//
// b.version (from o.wseq, never reused) names the bytes; b.cleanVer is the
// latest version stored below G2. b.wb (a wbState) exists only for a dirty
// period: made by writeBlock or markDirtyLocked, dropped when writeBack
// stores the block clean and it is not queued (a block at rest has none);
// in it covered and inPlace decide how long coalescing holds a block back,
// and retries and failedAt count failed write-backs. In a G2-only store
// (no G3, no G4) no block is ever dirty.
//
//	hole, clean in G2, below only
//	     | writeBlock, adoptLocked, copyForwardLocked
//	     v
//	   dirty --queueDirtyLocked--> held back --releaseOne, expedite*--+
//	     |                                                            |
//	     +----queueDirtyLocked (block written whole, not coalescing)--+--> queued
//	                                                                     |
//	                        writeBack: busy, put to G3 or G4 <-----------+
//	                          | same version: clean    | failed: writeBackFailed
//	                          v                        v   (retryWB or lose)
//	below only <--evictBlock, sinkBlock, Demote-- clean in G2
//	     +----promoteLocked, promoteMemLocked, toMemFileLocked----^
//
//	any --dropBlockLocked--> hole, copies stale --gcOne--> deleted
//	any --no good copy in any tier--> lose --> object removed
//
// The transitions and the functions that make them:
//
//	to dirty       writeBlock (WriteAt; Truncate and Discard zero partial
//	               blocks), reading the old bytes first (readLower) for a
//	               partial write of a block not in G2; adoptLocked
//	               (passthrough writes); copyForwardLocked (demoteOne,
//	               Fsck's dropLocked)
//	to held back   queueDirtyLocked, unless the write was urgent, the store
//	               is not coalescing (coalescing), closing, or delay.all is
//	               set; a block already in wbQueue stays there
//	to queued      queueDirtyLocked (urgent); releaseOne (delayLoop, when
//	               due or early over half the dirty bound); expediteLocked
//	               (Flush, flushDevice, Expedite, ClosePassthrough);
//	               expediteAll (waitRoom, evictLoop, CloseContext)
//	to busy        writeBack (beginBusy; a busy block is skipped, and the
//	               span's end requeues it: endBusyLocked)
//	to clean       writeBack, after the put, if b is still the block: sets
//	               b.in (G3 or G4) and cleanVer; only if b.version is unchanged
//	               clears dirty and calls makeEvictable; the other tier's
//	               copy turns stale and is deleted in the span
//	failed put     writeBackFailed: retryWB (device class always, files while
//	               the error is transient for less than WriteTimeout), else
//	               lose
//	to below only  evictBlock (evictLoop via evictOne, and Demote), first
//	               putting a block with no G3 copy to G3 when admission
//	               predicts reuse; sinkBlock (G4 only, the G3 copy turns
//	               stale); retireMemFileLocked, fromMemFileLocked
//	promoted       promoteLocked (readBlock when admitG2 admits; promote,
//	               which marks g2block.prestaged), promoteMemLocked,
//	               toMemFileLocked (OpenPassthrough)
//	G3 copy gone   demoteOne (G3 reclaim): G3 dropped from b.in and the copy stale,
//	               the bytes put to G4 or copied forward as dirty, unless G3
//	               keeps it (relocateInG3) or the segment (postponeG3Reclaim)
//	G3.5 copy      shareBlock adds G3.5 to b.in; writeBlock clears it (gc of the
//	               pool copy); Unshare clears it; Import makes blocks that
//	               have only G3.5 in b.in. G3.5 has no stale bit (tierBit is 0).
//	to hole        dropBlockLocked (Truncate, Discard, Delete and lose via
//	               dropObjectLocked): frees G2, queues every copy for gc,
//	               marks G3 and G4 copies (and an in-flight put) stale
//	stale cleared  gcOne: copyState re-checks under o.mu and opens a busy
//	               span, Delete runs unlocked, endGCDelete clears the bit;
//	               copyState when the live block holds the copy; writeBack,
//	               evictBlock, demoteOne and sinkBlock when they store the
//	               live bytes in that tier; Truncate to 0 drops every
//	               bit with the old generation (o.gen++)
//	lost           lose (removeObject): readLower finding no good copy
//	               (ReadAt; WriteAt, Truncate, Discard, OpenPassthrough),
//	               writeBackFailed, DemoteFromG3, Unshare, Fsck with Drop,
//	               reconcileG4; at Open, recover drops what it cannot find
//	G2-only store  evictObject removes whole objects (removeObject)
//
// # Locks
//
// Take locks in this order, never the reverse:
//
//	Store.fsckMu, Store.collectMu  TryLock, held for a whole Fsck or
//	                               CollectGarbage
//	object.mu                      one object at a time (cleanBatch alone
//	                               holds several, see there)
//	memFile.promoteMu              promoteMemLocked, under o.mu
//	Store.g2mu                     every mutating placement call
//	leaves                         memFile.mu, Store.wbmu, Store.delay.mu,
//	                               Store.cleanMu, Store.gcMu, Store.pt.mu,
//	                               bufPool.mu, signal.mu, logLimiter.mu,
//	                               health.Machine.mu, the heat package's
//	                               locks, bbolt's (meta.put, putMany)
//
// Leaves are taken under any of the above, and nothing is taken under a
// leaf. Store.mu (the object table: get, allocID, which commits to bbolt
// under it), Store.lostMu and g4recMu are taken with no other store lock
// held, so a path holding o.mu must not call get, lose or removeObject;
// CloseContext alone holds Store.mu while it locks each object, after its
// goroutines have stopped.
// blockState.g2 is read atomically under o.mu's read lock (readers install
// promoted copies with CompareAndSwap); every other field of blockState
// and object needs the write lock.
//
// Tier I/O: every tier Put and Delete runs with no store lock held, inside
// a busy span of the block while its object may still write the key. A G3
// Put or Delete may reclaim a segment and
// call DemoteFromG3 on the same goroutine under G3's roll lock
// (tier.Demoter), and demoteOne locks objects: a put made under o.mu would
// deadlock. The span protocol, as in writeBack, evictBlock, demoteOne,
// sinkBlock, shareBlock, gcOne (copyState, endGCDelete) and Fsck's check:
// under o.mu, give up or retry later if o.isBusy(idx); beginBusy; copy the
// bytes to a private buffer; remember b, b.version and the key (its
// generation); unlock; do the I/O; lock; apply the result only if the
// object is not deleted, o.gen, o.blocks.get(idx) and b.version are unchanged,
// else discardCopyLocked; endBusyLocked. So one key never has two versions
// in flight, while writers are never blocked by a span (they only bump
// b.version). Tier Gets may run under o.mu: ReadAt holds the read lock
// across readLower and promoteLocked (bounded by its ctx), and writeBlock,
// sinkBlock, shareBlock, toMemFileLocked and demoteOne read under the
// write lock; a slow tier then stalls that object's writers. Metadata
// commits run under o.mu (markMetaDirty, persistCleanLocked, cleanBatch).
//
// Never call with a lock held: tier Put or Delete; G4's MakeRoom (sinkPut:
// its size eviction asks the Retainer, which locks objects); SetG3Watermarks (G3
// reclaims on the caller's goroutine); waitRoom or any wait (Flush waits on
// o.flushed unlocked); lose and removeObject; trimMemFiles. Callbacks out
// of the package are made with no store lock held: OnLost's function, Import's register, FsckOptions.Name. (The health
// machines' onChange, a log line, may run under o.mu: getFrom is called
// from readLower. Events are sent under o.mu and subMu's read lock, never waiting:
// a full subscriber buffer drops them.)
//
// # Goroutines
//
// The Store owns its goroutines: Open starts them with s.wg.Add, each
// returns when s.ctx ends at the latest, and CloseContext, once write-back has drained
// (or its ctx ended), calls s.cancel and s.wg.Wait, then drains the GC
// queue on the caller's goroutine and closes the event subscriptions
// (events.go). The timers of delayLoop, cleanLoop, gcLoop and retryWB run
// on s.clk (Config.Clock), so a test with a clock.Fake moves them by
// advancing it; the other loops' periods are real time.
//
//	writeBackLoop    FlushWorkers of them (Open): pop wbQueue, writeBack;
//	                 each owns a 4 MiB staging buffer; a failed put's
//	                 pause (retryWB) sleeps on the worker
//	delayLoop        Open: moves held-back blocks to wbQueue (releaseDue)
//	evictLoop        Open: wakes on needEvict and every 200 ms; evicts
//	                 above the high watermark (lower for roomWanted)
//	gcLoop           Open: drainGC of the delete queue, retries gcLater
//	cleanLoop        Open: writes clean records of idle objects
//	watchDataDir     Open, when meta.db can be stated: checks every 2 s
//	                 that meta.db is the file opened; ends after reporting
//	recoverG4Loop    Open via startG4Recovery, only when G4 was not
//	                 listed: lists G4 with backoff, reconcileG4, ends
//	Prestage         one per call (also SetPinned): PrestageWait on s.ctx,
//	                 in s.wg
//
// Goroutines owned by a call, not by the Store:
//
//	drainGC workers   gcParallel per batch; drainGC waits for them
//	Fsck              a walker or retry feeder and Concurrency workers;
//	                  Fsck returns after work has drained them; its ctx
//	                  also ends with s.ctx (context.AfterFunc)
//	fscker.read       one per copy read, left running with its buffer
//	                  when the read times out
//	listTierCtx       one Range per CollectGarbage listing, left running
//	                  when ctx ends
//	recoverG4Loop's   one Range per attempt, left running when s.ctx ends
//	  Range
//
// A tier Range and an abandoned Get cannot be cancelled, so those last
// three may outlive the call, and CloseContext, until the tier returns;
// they only touch the tier and a buffered channel.
//
// # Crash guarantees
//
// meta.go documents the records and the rules (bbolt with NoSync: records
// survive kill -9, not a power cut). In short: an object is recorded dirty
// before its first change after a clean record (markMetaDirty) and clean
// only when no block is dirty and no stale copy is left but a G4-wins
// block's old G3 copy, which the record names, or a dropped block's
// (object.clean, staleExcused),
// once idle (cleanLoop), at Flush or at Close (persistAllClean). Open
// (recover) drops objects recorded dirty and clean objects with a written
// block missing from G3 and G4 (assumed in G4 until reconcileG4 when G4
// could not be listed), except that device-class objects (NBD exports)
// recorded dirty are rebuilt from the blocks found (recoverDevice); where
// G3 and G4 both hold a key G3 wins, except for a clean record's G4-wins
// blocks (object.g4Wins). Flush returns once the blocks written
// before it are below G2 and the record is clean (for a device-class
// object, flushDevice: recorded and no stale copy left), after asking G3 to
// Sync (syncTiers) when a block has its only copy there, so those bytes
// survive kill -9; a G2-only store keeps nothing across a restart.
package tiering
