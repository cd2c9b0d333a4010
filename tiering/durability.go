package tiering

import (
	"fmt"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// Durability is an object's durability class: what the store promises
// about its bytes. It is chosen at creation (CreateWith), recorded in the
// object's persisted record, reported by Stat and Objects
// (ObjectInfo.Durability), and never changes. It alone decides how the
// core treats the object under pressure and on failure; the object's Kind
// is only a label for its front end.
type Durability uint8

const (
	// DurabilityCache (the zero value) is for recomputable data such as
	// KV cache files: the store may drop the object under pressure (G2
	// eviction in a store with no lower tier, a write-back that keeps
	// failing past WriteTimeout, G4 expiry and size eviction), and a copy
	// that is gone makes the object read as ErrNotExist/ErrLost (ENOENT,
	// EIO). A record still dirty at restart drops the whole object.
	DurabilityCache Durability = iota
	// DurabilityDevice is for data that has no other copy, such as an NBD
	// export: the object is never dropped. Eviction never discards its
	// only copy (a G2-only store keeps it whole; G3 segment reclaim keeps
	// a block in G3 when G4 cannot take it); write-back is retried for as
	// long as it fails instead of given up; Flush returns once every write
	// made before it is stored below G2, and records the object at once;
	// G4 neither expires nor size-evicts its blocks (Store.KeyDurability);
	// after an unclean stop it is rebuilt from the blocks found below G2
	// (a disk keeps what reached it) instead of dropped. It is never
	// served by passthrough.
	DurabilityDevice
)

// String returns the class's name as persisted and shown: "cache",
// "device", or "durability(N)" for a value that names no class.
func (d Durability) String() string {
	switch d {
	case DurabilityCache:
		return "cache"
	case DurabilityDevice:
		return "device"
	}
	return fmt.Sprintf("durability(%d)", uint8(d))
}

// ParseDurability returns the class named s ("cache" or "device").
// Errors: ErrInvalid for any other string.
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "cache":
		return DurabilityCache, nil
	case "device":
		return DurabilityDevice, nil
	}
	return 0, fmt.Errorf("%w: durability class %q (want cache or device)", ErrInvalid, s)
}

func (d Durability) valid() bool { return d <= DurabilityDevice }

// CreateOptions are what CreateWith fixes for an object's whole life.
type CreateOptions struct {
	// Kind is a free-form label of the front end that owns the object
	// ("file" for fusefs, KindNBD for nbd), returned in ObjectInfo.Kind so
	// a front end can find its own objects again after a restart. The
	// store gives it no meaning.
	Kind string
	// Durability is the object's class (default DurabilityCache).
	Durability Durability
}

// legacyDeviceKind is the kind whose objects were never dropped before
// durability classes existed: a record without a durability field and of
// this kind is of class DurabilityDevice (recordDurability).
const legacyDeviceKind = "nbd"

// KindNBD is the Kind label nbd gives the objects of its exports (created
// DurabilityDevice). The store acts on it in one place only: a record
// persisted before durability classes existed (no durability field) with
// this kind loads as DurabilityDevice, as such exports were never dropped.
const KindNBD = legacyDeviceKind

// recordDurability returns the class of a persisted record: its
// durability field, or, for a record written before the field existed,
// DurabilityDevice when its kind is "nbd" (the old behaviour of such
// objects) and DurabilityCache otherwise. decodeObjectRecord has already
// rejected names of no class.
func recordDurability(rec *objectRecord) Durability {
	if rec.Durability == "" {
		if rec.Kind == legacyDeviceKind {
			return DurabilityDevice
		}
		return DurabilityCache
	}
	d, _ := ParseDurability(rec.Durability)
	return d
}

// KeyDurability returns the durability class of the object whose current
// generation k is a block of, and DurabilityCache for a key of no live
// object, of an older generation or of another namespace (garbage). It is
// what G4 retention asks (through g4Retainer, the tier.Retainer port Open
// attaches to G4): blocks for which it
// returns DurabilityDevice are never expired or evicted by size. It takes
// the object's read lock and no other.
func (s *Store) KeyDurability(k tier.Key) Durability {
	o := s.get(ObjectID(k.Object))
	if o == nil {
		return DurabilityCache
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	if o.gen != k.Gen || o.ns != k.Namespace {
		return DurabilityCache
	}
	return o.dur
}

// g4Retainer is the core's tier.Retainer port for G4 (attached in Open):
// blocks of device-class objects are never expired or evicted by size.
type g4Retainer struct{ s *Store }

// Retain implements tier.Retainer.
func (r g4Retainer) Retain(k tier.Key) bool { return r.s.KeyDurability(k) == DurabilityDevice }
