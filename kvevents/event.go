package kvevents

import (
	"bytes"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Kind is the type tag of an event.
type Kind uint8

// Event kinds (the "type" tag on the wire).
const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

func (k Kind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Event is one KV cache event.
type Event struct {
	Kind Kind
	// Hashes are the block hashes (BlockStored, BlockRemoved).
	Hashes []uint64
	// Medium is the tier name ("G2", "G3", "G3.5", "G4"); empty encodes
	// as nil. AllBlocksCleared carries none.
	Medium string
}

// Batch is the events of one message.
type Batch struct {
	// TS is when the batch was made.
	TS time.Time
	// Events in order.
	Events []Event
	// DPRank is vLLM's data_parallel_rank (0 for ctxmemd).
	DPRank int
}

// Encode returns b as msgpack, positionally: [ts, [events], dp_rank].
func Encode(b Batch) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	ts := float64(b.TS.UnixNano()) / 1e9
	err := firstErr(enc.EncodeArrayLen(3), enc.EncodeFloat64(ts), enc.EncodeArrayLen(len(b.Events)))
	for _, e := range b.Events {
		if err != nil {
			break
		}
		err = encodeEvent(enc, e)
	}
	if err == nil {
		err = enc.EncodeInt(int64(b.DPRank))
	}
	if err != nil {
		return nil, fmt.Errorf("kvevents: encode: %w", err)
	}
	return buf.Bytes(), nil
}

func encodeEvent(enc *msgpack.Encoder, e Event) error {
	medium := func() error {
		if e.Medium == "" {
			return enc.EncodeNil()
		}
		return enc.EncodeString(e.Medium)
	}
	hashes := func() error {
		if err := enc.EncodeArrayLen(len(e.Hashes)); err != nil {
			return err
		}
		for _, h := range e.Hashes {
			if err := enc.EncodeUint(h); err != nil {
				return err
			}
		}
		return nil
	}
	str := enc.EncodeString
	switch e.Kind {
	case BlockStored:
		return firstErr(enc.EncodeMapLen(8),
			str("type"), str("BlockStored"),
			str("block_hashes"), hashes(),
			str("parent_block_hash"), enc.EncodeNil(),
			str("token_ids"), enc.EncodeArrayLen(0),
			str("block_size"), enc.EncodeInt(0),
			str("lora_id"), enc.EncodeNil(),
			str("medium"), medium(),
			str("lora_name"), enc.EncodeNil())
	case BlockRemoved:
		return firstErr(enc.EncodeMapLen(3),
			str("type"), str("BlockRemoved"),
			str("block_hashes"), hashes(),
			str("medium"), medium())
	case AllBlocksCleared:
		return firstErr(enc.EncodeMapLen(1), str("type"), str("AllBlocksCleared"))
	}
	return fmt.Errorf("unknown event kind %d", e.Kind)
}

// firstErr returns the first non-nil error. Its arguments are evaluated in
// order, so a chain of encoder calls writes in order.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Decode parses a payload written by Encode (or by any producer of the
// positional batch whose events are tagged maps or tagged sequences, as
// Dynamo's decoder accepts). Unknown keys and extra positions are ignored;
// hashes may be signed or unsigned.
func Decode(p []byte) (Batch, error) {
	var raw []any
	dec := msgpack.NewDecoder(bytes.NewReader(p))
	dec.UseLooseInterfaceDecoding(true)
	if err := dec.Decode(&raw); err != nil {
		return Batch{}, fmt.Errorf("kvevents: decode: %w", err)
	}
	if len(raw) < 2 {
		return Batch{}, fmt.Errorf("kvevents: decode: batch of %d elements, want [ts, events, dp_rank]", len(raw))
	}
	var b Batch
	ts, ok := raw[0].(float64)
	if !ok {
		return Batch{}, fmt.Errorf("kvevents: decode: ts is %T", raw[0])
	}
	b.TS = time.Unix(0, int64(ts*1e9))
	evs, ok := raw[1].([]any)
	if !ok {
		return Batch{}, fmt.Errorf("kvevents: decode: events is %T", raw[1])
	}
	if len(raw) > 2 && raw[2] != nil {
		r, _ := asUint(raw[2])
		b.DPRank = int(r)
	}
	for i, x := range evs {
		e, err := decodeEvent(x)
		if err != nil {
			return Batch{}, fmt.Errorf("kvevents: decode: event %d: %w", i, err)
		}
		b.Events = append(b.Events, e)
	}
	return b, nil
}

func decodeEvent(x any) (Event, error) {
	var typ string
	var hashes, medium any
	switch v := x.(type) {
	case map[string]any:
		typ, _ = v["type"].(string)
		hashes, medium = v["block_hashes"], v["medium"]
	case []any:
		if len(v) == 0 {
			return Event{}, fmt.Errorf("empty sequence")
		}
		typ, _ = v[0].(string)
		at := func(i int) any {
			if i < len(v) {
				return v[i]
			}
			return nil
		}
		switch typ {
		case "BlockStored": // tag, hashes, parent, tokens, block_size, lora_id, medium
			hashes, medium = at(1), at(6)
		case "BlockRemoved": // tag, hashes, medium
			hashes, medium = at(1), at(2)
		}
	default:
		return Event{}, fmt.Errorf("event is %T", x)
	}
	var e Event
	switch typ {
	case "BlockStored":
		e.Kind = BlockStored
	case "BlockRemoved":
		e.Kind = BlockRemoved
	case "AllBlocksCleared":
		return Event{Kind: AllBlocksCleared}, nil
	default:
		return Event{}, fmt.Errorf("unknown type %q", typ)
	}
	hs, ok := hashes.([]any)
	if !ok {
		return Event{}, fmt.Errorf("%s: block_hashes is %T", typ, hashes)
	}
	for _, h := range hs {
		u, ok := asUint(h)
		if !ok {
			return Event{}, fmt.Errorf("%s: hash is %T", typ, h)
		}
		e.Hashes = append(e.Hashes, u)
	}
	if m, ok := medium.(string); ok {
		e.Medium = m
	}
	return e, nil
}

func asUint(x any) (uint64, bool) {
	switch v := x.(type) {
	case uint64:
		return v, true
	case int64:
		return uint64(v), true
	}
	return 0, false
}
