// Package kvevents publishes KV-cache block events in the wire format of
// vLLM's KV event publisher, so that KV-aware routers (vLLM's own ZMQ
// subscribers, NVIDIA Dynamo's KV router, llm-d) learn which block hashes
// a ctxmemd host keeps, and in which storage tier ("medium").
//
// # Versions followed
//
//   - vLLM vllm/distributed/kv_events.py at commit
//     0181ea3173e53eea8cf04a86891488e3dc89bb34 (event structs, ZMQ
//     publisher, replay protocol).
//   - Dynamo lib/kv-router/src/zmq_wire.rs at commit
//     0cda21dc69fd4cfa51a4d62cc76028e0f1b71f06 (the decoder: a positional
//     batch, events as tagged maps or tagged sequences, unknown keys
//     ignored, hashes as i64 or u64).
//
// # Wire format
//
// Each batch is one ZMQ PUB message of three frames:
//
//  1. topic: the configured topic, UTF-8 (vLLM's default is "", which
//     every subscriber receives);
//  2. sequence: a uint64, 8 bytes big-endian, 0 for the first batch of
//     a process and +1 for each batch after it;
//  3. payload: one msgpack value, the batch encoded positionally:
//     [ts float64 (Unix seconds), [event, ...], data_parallel_rank int].
//
// Each event is a msgpack map tagged by "type" (msgspec's tag=True):
//
//	{"type": "BlockStored", "block_hashes": [uint64], "parent_block_hash": nil,
//	 "token_ids": [], "block_size": 0, "lora_id": nil, "medium": "G2", "lora_name": nil}
//	{"type": "BlockRemoved", "block_hashes": [uint64], "medium": "G3"}
//	{"type": "AllBlocksCleared"}
//
// ctxmemd knows a block by its file name only: token_ids is always empty,
// block_size (tokens per block) 0 and parent_block_hash nil, and every
// BlockStored names one hash (several hashes in one BlockStored would
// claim they form a chain). medium is a ctxmemd tier name: "G2" (host
// DRAM), "G3" (local NVMe), "G3.5" (shared pool), "G4" (object storage).
//
// # Replay
//
// With a replay endpoint, a ROUTER socket answers a request whose last
// frame is a start sequence (8 bytes big-endian; a REQ client sends
// [start], a DEALER client ["", start]) with one message [seq, payload]
// per buffered batch whose seq is at least start, oldest first, then
// [END_SEQ, ""] where END_SEQ is -1 as 8 bytes big-endian
// (0xffffffffffffffff). The buffer holds the latest Options.Buffer
// batches; older ones are gone (the subscriber learns it from the first
// seq it gets back).
//
// # Restarts
//
// The sequence is per process: after a restart it starts again at 0
// (subscribers treat a sequence going backwards as a publisher restart),
// and the tracker's first batch is a single AllBlocksCleared (vLLM's
// AllBlocksCleared has no medium: it clears every medium of the
// publisher), followed by a BlockStored for every block the mount holds.
package kvevents
