package msg

import "github.com/ctxmem/ctxmemd/internal/msgpackguard"

// checkShape refuses data unless it is exactly one MessagePack value whose
// arrays and maps declare no more elements than bytes remain (see
// msgpackguard.Check): the decoder pre-allocates declared lengths.
func checkShape(data []byte) error { return msgpackguard.Check(data) }
