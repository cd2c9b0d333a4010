package nbd

import (
	"encoding/binary"

	"github.com/pojntfx/go-nbd/pkg/protocol"
)

// Protocol constants. Those go-nbd's protocol package defines are used from
// there; the rest are from the NBD protocol specification (proto.md of the
// NetworkBlockDevice/nbd project, the same values libnbd's nbd-protocol.h
// uses). Names follow the specification with the NBD_ prefix dropped.

// Handshake flags (server) and client flags.
const (
	flagFixedNewstyle = protocol.NEGOTIATION_HANDSHAKE_FLAG_FIXED_NEWSTYLE // 1 << 0
	flagNoZeroes      = uint16(1 << 1)

	clientFixedNewstyle = uint32(1 << 0)
	clientNoZeroes      = uint32(1 << 1)
)

// Option types.
const (
	optExportName      = uint32(1)
	optAbort           = protocol.NEGOTIATION_ID_OPTION_ABORT // 2
	optList            = protocol.NEGOTIATION_ID_OPTION_LIST  // 3
	optStartTLS        = uint32(5)
	optInfo            = protocol.NEGOTIATION_ID_OPTION_INFO // 6
	optGo              = protocol.NEGOTIATION_ID_OPTION_GO   // 7
	optStructuredReply = uint32(8)
	optListMetaContext = uint32(9)
	optSetMetaContext  = uint32(10)
)

// Option reply types.
const (
	repAck         = protocol.NEGOTIATION_TYPE_REPLY_ACK    // 1
	repServer      = protocol.NEGOTIATION_TYPE_REPLY_SERVER // 2
	repInfo        = protocol.NEGOTIATION_TYPE_REPLY_INFO   // 3
	repMetaContext = uint32(4)

	repErrUnsup   = protocol.NEGOTIATION_TYPE_REPLY_ERR_UNSUPPORTED // 2^31 + 1
	repErrPolicy  = uint32(1<<31 | 2)
	repErrInvalid = uint32(1<<31 | 3)
	repErrUnknown = protocol.NEGOTIATION_TYPE_REPLY_ERR_UNKNOWN // 2^31 + 6
	repErrTooBig  = uint32(1<<31 | 9)
)

// Info types of NBD_REP_INFO.
const (
	infoExport      = protocol.NEGOTIATION_TYPE_INFO_EXPORT      // 0
	infoName        = protocol.NEGOTIATION_TYPE_INFO_NAME        // 1
	infoDescription = protocol.NEGOTIATION_TYPE_INFO_DESCRIPTION // 2
	infoBlockSize   = protocol.NEGOTIATION_TYPE_INFO_BLOCKSIZE   // 3
)

// Transmission flags (per export).
const (
	tflagHasFlags        = protocol.NEGOTIATION_REPLY_FLAGS_HAS_FLAGS // 1 << 0
	tflagReadOnly        = uint16(1 << 1)
	tflagSendFlush       = uint16(1 << 2)
	tflagSendFUA         = uint16(1 << 3)
	tflagSendTrim        = uint16(1 << 5)
	tflagSendWriteZeroes = uint16(1 << 6)
	tflagSendDF          = uint16(1 << 7)
	tflagCanMultiConn    = protocol.NEGOTIATION_REPLY_FLAGS_CAN_MULTI_CONN // 1 << 8
)

// Request types.
const (
	cmdRead        = protocol.TRANSMISSION_TYPE_REQUEST_READ  // 0
	cmdWrite       = protocol.TRANSMISSION_TYPE_REQUEST_WRITE // 1
	cmdDisc        = protocol.TRANSMISSION_TYPE_REQUEST_DISC  // 2
	cmdFlush       = uint16(3)
	cmdTrim        = uint16(4)
	cmdWriteZeroes = uint16(6)
	cmdBlockStatus = uint16(7)
)

// Command flags.
const (
	cmdFlagFUA    = uint16(1 << 0)
	cmdFlagNoHole = uint16(1 << 1)
	cmdFlagDF     = uint16(1 << 2)
	cmdFlagReqOne = uint16(1 << 3)
)

// Structured replies.
const (
	structuredReplyMagic = uint32(0x668e33ef)
	replyFlagDone        = uint16(1 << 0)

	replyTypeNone        = uint16(0)
	replyTypeOffsetData  = uint16(1)
	replyTypeBlockStatus = uint16(5)
	replyTypeError       = uint16(1<<15 | 1)
	replyTypeErrorOffset = uint16(1<<15 | 2)
)

// base:allocation metadata context.
const (
	metaBaseAllocation   = "base:allocation"
	metaBaseAllocationID = uint32(1)
	stateHole            = uint32(1 << 0)
	stateZero            = uint32(1 << 1)
)

// Error values of the transmission phase (proto.md "Error values"). They
// are the Linux errno numbers.
const (
	errPerm     = protocol.TRANSMISSION_ERROR_EPERM // 1
	errIO       = uint32(5)
	errInval    = protocol.TRANSMISSION_ERROR_EINVAL // 22
	errNoSpc    = uint32(28)
	errOverflow = uint32(75)
	errNotSup   = uint32(95)
	errShutdown = uint32(108)
)

// Sizes of wire messages in bytes.
const (
	requestHeaderLen    = 28 // magic, flags, type, handle, offset, length
	simpleReplyLen      = 16 // magic, error, handle
	structuredHeaderLen = 20 // magic, flags, type, handle, length
	optionHeaderLen     = 16 // magic, option, length
	optionReplyLen      = 20 // magic, option, type, length
)

// decodeRequest parses a 28-byte request header (proto.md "Request
// message") into go-nbd's header struct.
func decodeRequest(b []byte, h *protocol.TransmissionRequestHeader) {
	h.RequestMagic = binary.BigEndian.Uint32(b[0:4])
	h.CommandFlags = binary.BigEndian.Uint16(b[4:6])
	h.Type = binary.BigEndian.Uint16(b[6:8])
	h.Handle = binary.BigEndian.Uint64(b[8:16])
	h.Offset = binary.BigEndian.Uint64(b[16:24])
	h.Length = binary.BigEndian.Uint32(b[24:28])
}

// appendSimpleReply appends a simple reply header (16 bytes).
func appendSimpleReply(b []byte, errno uint32, handle uint64) []byte {
	b = binary.BigEndian.AppendUint32(b, protocol.TRANSMISSION_MAGIC_REPLY)
	b = binary.BigEndian.AppendUint32(b, errno)
	return binary.BigEndian.AppendUint64(b, handle)
}

// appendChunkHeader appends a structured reply chunk header (20 bytes);
// length is the payload length that follows it.
func appendChunkHeader(b []byte, flags, typ uint16, handle uint64, length uint32) []byte {
	b = binary.BigEndian.AppendUint32(b, structuredReplyMagic)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint64(b, handle)
	return binary.BigEndian.AppendUint32(b, length)
}

// maxErrorMessage bounds the human-readable message of an error chunk.
const maxErrorMessage = 1024

// appendErrorChunk appends a complete NBD_REPLY_TYPE_ERROR chunk, or
// NBD_REPLY_TYPE_ERROR_OFFSET when withOffset is set, with the DONE flag.
func appendErrorChunk(b []byte, handle uint64, errno uint32, msg string, withOffset bool, offset uint64) []byte {
	if len(msg) > maxErrorMessage {
		msg = msg[:maxErrorMessage]
	}
	typ, plen := replyTypeError, uint32(6+len(msg))
	if withOffset {
		typ, plen = replyTypeErrorOffset, plen+8
	}
	b = appendChunkHeader(b, replyFlagDone, typ, handle, plen)
	b = binary.BigEndian.AppendUint32(b, errno)
	b = binary.BigEndian.AppendUint16(b, uint16(len(msg)))
	b = append(b, msg...)
	if withOffset {
		b = binary.BigEndian.AppendUint64(b, offset)
	}
	return b
}

// appendOptionReply appends an option reply header (20 bytes) for a reply
// whose data is length bytes long.
func appendOptionReply(b []byte, opt, typ, length uint32) []byte {
	b = binary.BigEndian.AppendUint64(b, protocol.NEGOTIATION_MAGIC_REPLY)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, typ)
	return binary.BigEndian.AppendUint32(b, length)
}
