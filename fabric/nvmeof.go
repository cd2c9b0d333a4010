package fabric

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
)

// NVMe-oF target description and the option string the Linux initiator
// takes. Sources (read, not copied):
//   - NVM Express Base Specification 2.0, §4.5 "NVMe Qualified Names".
//   - Linux drivers/nvme/host/fabrics.c: opt_tokens (option names),
//     nvmf_parse_options (value ranges), nvmf_dev_show (the reply);
//     drivers/nvme/host/fabrics.h and include/linux/nvme.h (limits and
//     defaults: NVMF_NQN_SIZE, NVMF_MIN/MAX_QUEUE_SIZE, NVME_RDMA_IP_PORT).
//   - nvme-cli (libnvme src/nvme/fabrics.c build_options): the order in
//     which `nvme connect` writes the options, and its defaults
//     (trsvcid 4420 for tcp/rdma, ctrl_loss_tmo 600 always written).

// DefaultSvcID is the NVMe-oF I/O controller port used when Target.SvcID is
// zero (NVME_RDMA_IP_PORT in include/linux/nvme.h; nvme-cli's default for
// tcp and rdma I/O controllers).
const DefaultSvcID = 4420

// DefaultCtrlLossTmo is the ctrl_loss_tmo, in seconds, written when
// Target.CtrlLossTmo is zero: nvme-cli always writes it with this value
// (NVMF_DEF_CTRL_LOSS_TMO in libnvme fabrics.h and in the kernel's fabrics.h).
const DefaultCtrlLossTmo = 600

// Special Target.CtrlLossTmo values.
const (
	// CtrlLossForever makes the kernel reconnect forever after a
	// connection loss (ctrl_loss_tmo=-1).
	CtrlLossForever = -1
	// CtrlLossNoReconnect makes the kernel give up at the first connection
	// loss and delete the controller (ctrl_loss_tmo=0).
	CtrlLossNoReconnect = -2
)

// MaxNQNBytes is the longest NQN the NVMe Base Specification 2.0 §4.5
// allows, in bytes of UTF-8.
const MaxNQNBytes = 223

// maxKernelNQNBytes is the longest NQN Linux accepts: nvmf_parse_options
// rejects strlen >= NVMF_NQN_SIZE (223), one byte short of the spec.
const maxKernelNQNBytes = MaxNQNBytes - 1

// DiscoveryNQN is the well-known NQN of NVMe-oF discovery controllers
// (NVMe Base Specification 2.0 §4.5; NVME_DISC_SUBSYS_NAME in Linux).
const DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

// uuidNQNPrefix starts the NQN form built from a UUID (§4.5).
const uuidNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"

// Kernel limits on the optional numeric options (nvmf_parse_options).
const (
	minQueueSize = 16   // NVMF_MIN_QUEUE_SIZE
	maxQueueSize = 1024 // NVMF_MAX_QUEUE_SIZE
)

// ErrInvalidTarget is wrapped by every Target.Validate error.
var ErrInvalidTarget = errors.New("fabric: invalid NVMe-oF target")

// Target is one NVMe-oF subsystem reached through one port, as `nvme
// connect` describes it. Zero numeric fields mean "not set": the option is
// left out and the kernel default applies (except CtrlLossTmo, see there).
type Target struct {
	// Transport is "tcp" or "rdma".
	Transport string `json:"transport" yaml:"transport"`
	// Addr is the target port's IP address (IPv4 or IPv6, an IPv6 zone
	// such as "fe80::1%eth0" allowed); written as traddr=.
	Addr string `json:"addr" yaml:"addr"`
	// SvcID is the target's TCP port (or RDMA CM port); 0 means
	// DefaultSvcID (4420). Written as trsvcid=.
	SvcID int `json:"svcid,omitempty" yaml:"svcid,omitempty"`
	// NQN is the subsystem's NVMe Qualified Name; written as nqn=.
	NQN string `json:"nqn" yaml:"nqn"`
	// HostNQN is this host's NQN (the target's access list names it);
	// empty leaves it out and the kernel uses its default host NQN, a
	// random UUID NQN made at module load — set it for a stable identity.
	HostNQN string `json:"host_nqn,omitempty" yaml:"host_nqn,omitempty"`
	// HostID is this host's identifier, a UUID "xxxxxxxx-xxxx-xxxx-xxxx-
	// xxxxxxxxxxxx"; empty leaves it out (kernel default).
	HostID string `json:"host_id,omitempty" yaml:"host_id,omitempty"`
	// NrIOQueues caps the number of I/O queues (the kernel also caps it at
	// the number of online CPUs); 0 means one per online CPU.
	NrIOQueues int `json:"nr_io_queues,omitempty" yaml:"nr_io_queues,omitempty"`
	// QueueSize is the I/O queue depth, 16..1024; 0 means the kernel
	// default (128).
	QueueSize int `json:"queue_size,omitempty" yaml:"queue_size,omitempty"`
	// CtrlLossTmo is how long, in seconds, the kernel keeps reconnecting a
	// lost controller before deleting it. 0 means DefaultCtrlLossTmo (600,
	// written explicitly as nvme-cli does); CtrlLossForever and
	// CtrlLossNoReconnect ask for -1 and 0.
	CtrlLossTmo int `json:"ctrl_loss_tmo,omitempty" yaml:"ctrl_loss_tmo,omitempty"`
	// ReconnectDelay is the time between reconnect attempts, in seconds; 0
	// means the kernel default (10).
	ReconnectDelay int `json:"reconnect_delay,omitempty" yaml:"reconnect_delay,omitempty"`
	// KeepAliveTmo is the keep-alive timeout, in seconds; 0 means the
	// kernel default (5). (The kernel would take 0 as "no keep-alive", a
	// debugging setting this type cannot express, like nvme-cli.)
	KeepAliveTmo int `json:"keep_alive_tmo,omitempty" yaml:"keep_alive_tmo,omitempty"`
}

// Validate reports the first problem with t, as an error wrapping
// ErrInvalidTarget: an unknown transport, an address that is not an IP
// address (or is unspecified or multicast), a port outside 0..65535, a
// subsystem or host NQN that breaks NVMe Base Specification 2.0 §4.5 (see
// ValidateNQN) or is the discovery NQN, a host ID that is not a UUID, or a
// numeric option the kernel would reject.
func (t Target) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidTarget, fmt.Sprintf(format, a...))
	}
	switch t.Transport {
	case "tcp", "rdma":
	case "":
		return bad("no transport (want \"tcp\" or \"rdma\")")
	default:
		return bad("transport %q not supported (want \"tcp\" or \"rdma\")", t.Transport)
	}
	if t.Addr == "" {
		return bad("no target address")
	}
	a, err := netip.ParseAddr(t.Addr)
	if err != nil {
		return bad("address %q is not an IP address", t.Addr)
	}
	if a.IsUnspecified() || a.IsMulticast() {
		return bad("address %q cannot be a target port", t.Addr)
	}
	if t.SvcID < 0 || t.SvcID > 65535 {
		return bad("port %d outside 1..65535", t.SvcID)
	}
	if t.NQN == DiscoveryNQN {
		return bad("NQN %q is the discovery subsystem, not an I/O subsystem", t.NQN)
	}
	if err := ValidateNQN(t.NQN); err != nil {
		return bad("subsystem %v", err)
	}
	if t.HostNQN != "" {
		if err := ValidateNQN(t.HostNQN); err != nil {
			return bad("host %v", err)
		}
	}
	if t.HostID != "" && !isUUID(t.HostID) {
		return bad("host ID %q is not a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", t.HostID)
	}
	if t.NrIOQueues < 0 {
		return bad("nr_io_queues %d is negative", t.NrIOQueues)
	}
	if t.QueueSize != 0 && (t.QueueSize < minQueueSize || t.QueueSize > maxQueueSize) {
		return bad("queue_size %d outside %d..%d", t.QueueSize, minQueueSize, maxQueueSize)
	}
	if t.CtrlLossTmo < CtrlLossNoReconnect {
		return bad("ctrl_loss_tmo %d: want seconds >= 0, CtrlLossForever or CtrlLossNoReconnect", t.CtrlLossTmo)
	}
	if t.ReconnectDelay < 0 {
		return bad("reconnect_delay %d is negative", t.ReconnectDelay)
	}
	if t.KeepAliveTmo < 0 {
		return bad("keep_alive_tmo %d is negative", t.KeepAliveTmo)
	}
	return nil
}

// svcID returns the port to write: SvcID, or DefaultSvcID when zero.
func (t Target) svcID() int {
	if t.SvcID == 0 {
		return DefaultSvcID
	}
	return t.SvcID
}

// traddr returns Addr in canonical text form (IPv4-mapped IPv6 unmapped),
// so that it matches what sysfs later shows; Addr itself if unparsable.
func (t Target) traddr() string {
	a, err := netip.ParseAddr(t.Addr)
	if err != nil {
		return t.Addr
	}
	return a.Unmap().String()
}

// ctrlLossTmo returns the ctrl_loss_tmo value to write.
func (t Target) ctrlLossTmo() int {
	switch t.CtrlLossTmo {
	case 0:
		return DefaultCtrlLossTmo
	case CtrlLossNoReconnect:
		return 0
	case CtrlLossForever:
		return -1
	}
	return t.CtrlLossTmo
}

// OptionString returns the connect request written to /dev/nvme-fabrics,
// byte for byte what `nvme connect -t T -a A -s S -n NQN ...` writes for
// the same settings (libnvme build_options): comma-separated key=value
// pairs, no trailing newline, in this order:
//
//	nqn=,transport=,traddr=,trsvcid=,hostnqn=,hostid=,nr_io_queues=,
//	queue_size=,keep_alive_tmo=,reconnect_delay=,ctrl_loss_tmo=
//
// Unset optional keys are left out; trsvcid and ctrl_loss_tmo are always
// present (defaults 4420 and 600). The kernel parses the keys in any
// order (fabrics.c opt_tokens). Call Validate first: OptionString does not
// check t.
func (t Target) OptionString() string {
	var b strings.Builder
	kv := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
	}
	num := func(k string, v int) {
		if v > 0 {
			kv(k, strconv.Itoa(v))
		}
	}
	kv("nqn", t.NQN)
	kv("transport", t.Transport)
	kv("traddr", t.traddr())
	kv("trsvcid", strconv.Itoa(t.svcID()))
	if t.HostNQN != "" {
		kv("hostnqn", t.HostNQN)
	}
	if t.HostID != "" {
		kv("hostid", t.HostID)
	}
	num("nr_io_queues", t.NrIOQueues)
	num("queue_size", t.QueueSize)
	num("keep_alive_tmo", t.KeepAliveTmo)
	num("reconnect_delay", t.ReconnectDelay)
	kv("ctrl_loss_tmo", strconv.Itoa(t.ctrlLossTmo()))
	return b.String()
}

// ValidateNQN checks that s is an NVMe Qualified Name as NVMe Base
// Specification 2.0 §4.5 defines it and Linux accepts it:
//
//   - "nqn.2014-08.org.nvmexpress:uuid:" followed by a UUID
//     (8-4-4-4-12 hexadecimal digits), or
//   - "nqn." yyyy "-" mm "." reverse-domain ":" string, where mm is
//     01..12, reverse-domain has at least two dot-separated labels of
//     letters, digits and inner hyphens, and string is not empty, or
//   - DiscoveryNQN.
//
// It must be valid UTF-8 of at most 222 bytes: the spec allows 223, but
// Linux rejects 223 (strlen >= NVMF_NQN_SIZE in nvmf_parse_options). This
// package also refuses commas, whitespace and control characters, which
// would break the comma-separated connect request or the sysfs
// attributes it is read back from. The error says what is wrong.
func ValidateNQN(s string) error {
	switch {
	case s == "":
		return errors.New("NQN is empty")
	case !utf8.ValidString(s):
		return fmt.Errorf("NQN %q is not valid UTF-8", s)
	case len(s) > MaxNQNBytes:
		return fmt.Errorf("NQN is %d bytes, more than the %d the NVMe spec allows", len(s), MaxNQNBytes)
	case len(s) > maxKernelNQNBytes:
		return fmt.Errorf("NQN is %d bytes; Linux accepts at most %d", len(s), maxKernelNQNBytes)
	}
	for _, r := range s {
		if r == ',' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("NQN %q contains %q (commas, whitespace and control characters are not allowed)", s, r)
		}
	}
	if s == DiscoveryNQN {
		return nil
	}
	if strings.HasPrefix(s, uuidNQNPrefix) {
		if u := s[len(uuidNQNPrefix):]; !isUUID(u) {
			return fmt.Errorf("NQN %q: %q after %q is not a UUID", s, u, uuidNQNPrefix)
		}
		return nil
	}
	rest, ok := strings.CutPrefix(s, "nqn.")
	if !ok {
		return fmt.Errorf("NQN %q does not start with \"nqn.\"", s)
	}
	if len(rest) < 8 || rest[4] != '-' || rest[7] != '.' ||
		!allDigits(rest[:4]) || !allDigits(rest[5:7]) || rest[5:7] < "01" || rest[5:7] > "12" {
		return fmt.Errorf("NQN %q: want a date \"yyyy-mm.\" after \"nqn.\"", s)
	}
	domain, user, ok := strings.Cut(rest[8:], ":")
	if !ok {
		return fmt.Errorf("NQN %q: want \":\" and a name after the reverse domain", s)
	}
	if user == "" {
		return fmt.Errorf("NQN %q: empty name after \":\"", s)
	}
	labels := strings.Split(domain, ".")
	if len(labels) < 2 {
		return fmt.Errorf("NQN %q: reverse domain %q needs at least two labels (e.g. com.example)", s, domain)
	}
	for _, l := range labels {
		if !isDomainLabel(l) {
			return fmt.Errorf("NQN %q: %q is not a domain label (letters, digits, inner hyphens)", s, l)
		}
	}
	return nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isDomainLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// isUUID reports whether s is a UUID in the 8-4-4-4-12 hexadecimal form
// the kernel's uuid_parse accepts.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// Errors of Attacher. Each returned error wraps one of them (test with
// errors.Is) and, where the kernel said why, the syscall.Errno as well.
var (
	// ErrNoFabrics: the fabrics control device is missing, so the
	// nvme-fabrics module is not loaded (or the kernel lacks it).
	ErrNoFabrics = errors.New("fabric: NVMe-oF initiator unavailable")
	// ErrRejected: the kernel refused the connect request (bad options,
	// transport module missing, target unreachable or refusing the host).
	ErrRejected = errors.New("fabric: kernel rejected the connect request")
	// ErrAlreadyConnected: a controller to the same target, with the same
	// host NQN, already exists (EALREADY).
	ErrAlreadyConnected = errors.New("fabric: already connected to this target")
	// ErrBadReply: the kernel's answer did not carry instance= and cntlid=.
	ErrBadReply = errors.New("fabric: malformed reply from the fabrics device")
	// ErrNoNamespaces: the controller connected but no namespace block
	// device appeared before the wait ended.
	ErrNoNamespaces = errors.New("fabric: no namespace appeared")
	// ErrNoController: no controller of that name in sysfs.
	ErrNoController = errors.New("fabric: no such NVMe controller")
)

// DefaultFabricsDevice is the Linux NVMe-oF control device (a misc char
// device, drivers/nvme/host/fabrics.c nvmf_misc).
const DefaultFabricsDevice = "/dev/nvme-fabrics"

// DefaultSysfsRoot is where sysfs is mounted.
const DefaultSysfsRoot = "/sys"

// DefaultNamespaceWait bounds how long Attach waits for namespaces to
// appear when the Attacher does not say.
const DefaultNamespaceWait = 30 * time.Second

// maxReply bounds the kernel's answer to a connect request; it is one line
// "instance=N,cntlid=M\n" (fabrics.c nvmf_dev_show). nvme-cli reads 4 KiB.
const maxReply = 4096

// Device opens the fabrics control device. The kernel's protocol on one
// open file: one write of the whole option string creates the controller
// (or fails with an errno), then reads return "instance=N,cntlid=M\n".
// CharDevice is the real one; tests supply a fake that answers.
type Device interface {
	// Open opens the device at path for reading and writing.
	Open(path string) (io.ReadWriteCloser, error)
}

// CharDevice is the real /dev/nvme-fabrics: os.OpenFile with O_RDWR.
type CharDevice struct{}

// Open opens path read-write. Errors are *fs.PathError wrapping the errno.
func (CharDevice) Open(path string) (io.ReadWriteCloser, error) {
	return os.OpenFile(path, os.O_RDWR, 0)
}

var _ Device = CharDevice{}

// Attacher attaches NVMe-oF namespaces with the kernel initiator, as
// `nvme connect` does, and detaches them as `nvme disconnect` does. The
// zero value uses the real device and sysfs. It holds no state; it is
// safe for concurrent use (the kernel serialises connect requests).
type Attacher struct {
	// DevicePath is the fabrics control device; "" means
	// DefaultFabricsDevice.
	DevicePath string
	// SysfsRoot is where sysfs is mounted; "" means DefaultSysfsRoot.
	SysfsRoot string
	// Device opens DevicePath; nil means CharDevice{}.
	Device Device
	// NamespaceWait bounds the wait for namespaces after the controller
	// is created (on top of Attach's ctx); 0 means DefaultNamespaceWait.
	NamespaceWait time.Duration
	// PollInterval is how often sysfs is re-read while waiting; 0 means
	// 50 ms.
	PollInterval time.Duration
}

func (a *Attacher) devicePath() string {
	if a.DevicePath == "" {
		return DefaultFabricsDevice
	}
	return a.DevicePath
}

func (a *Attacher) sysfs() string {
	if a.SysfsRoot == "" {
		return DefaultSysfsRoot
	}
	return a.SysfsRoot
}

// Attach connects to t: it validates t, writes t.OptionString() to the
// fabrics device, reads back the kernel's "instance=N,cntlid=M", then
// waits — up to NamespaceWait and while ctx lasts — until sysfs shows the
// new controller nvmeN with at least one namespace block device and the
// set has stopped growing (unchanged over one PollInterval), and returns
// it (Namespaces sorted by NSID, sizes in bytes).
//
// Errors wrap: ErrInvalidTarget (nothing written); ErrNoFabrics (device
// missing: load the module with `modprobe nvme-fabrics`); ErrRejected with
// the errno (EINVAL: bad options or missing transport module; ECONNREFUSED,
// EHOSTUNREACH, ETIMEDOUT: target unreachable; EADDRINUSE: host NQN
// clash; see dmesg); ErrAlreadyConnected, in which case the returned
// Controller is the existing one when sysfs shows it; ErrBadReply; and
// ErrNoNamespaces with the context error, after which Attach has already
// deleted the controller it created (best effort).
func (a *Attacher) Attach(ctx context.Context, t Target) (Controller, error) {
	if err := t.Validate(); err != nil {
		return Controller{}, err
	}
	if err := ctx.Err(); err != nil {
		return Controller{}, fmt.Errorf("fabric: attach %s: %w", t.NQN, err)
	}
	instance, cntlid, err := a.connect(t.OptionString())
	if errors.Is(err, ErrAlreadyConnected) {
		return a.existing(t), err
	}
	if err != nil {
		return Controller{}, err
	}
	name := "nvme" + strconv.Itoa(instance)
	c, err := a.waitNamespaces(ctx, name)
	if err != nil {
		derr := writeDelete(a.sysfs(), name)
		if derr != nil {
			return Controller{}, fmt.Errorf("fabric: %s (cntlid %d) for %s: %w; deleting it also failed: %v",
				name, cntlid, t.NQN, err, derr)
		}
		return Controller{}, fmt.Errorf("fabric: %s (cntlid %d) for %s: %w; controller deleted", name, cntlid, t.NQN, err)
	}
	if c.Instance != instance || c.CntlID != cntlid {
		// sysfs is the kernel's word; a mismatch means another
		// controller took the name in between, which cannot happen
		// while ours holds it. Report rather than guess.
		return c, fmt.Errorf("%w: kernel said instance=%d,cntlid=%d but sysfs %s has cntlid %d",
			ErrBadReply, instance, cntlid, name, c.CntlID)
	}
	return c, nil
}

// connect performs the write/read exchange with the fabrics device.
func (a *Attacher) connect(opts string) (instance, cntlid int, err error) {
	dev := a.Device
	if dev == nil {
		dev = CharDevice{}
	}
	path := a.devicePath()
	f, err := dev.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.ENXIO) {
			return 0, 0, fmt.Errorf("%w: %s: %w (the nvme-fabrics module is not loaded: modprobe nvme-fabrics, and nvme-tcp or nvme-rdma)",
				ErrNoFabrics, path, err)
		}
		if errors.Is(err, fs.ErrPermission) {
			return 0, 0, fmt.Errorf("%w: %s: %w (needs root)", ErrNoFabrics, path, err)
		}
		return 0, 0, fmt.Errorf("%w: open %s: %w", ErrNoFabrics, path, err)
	}
	defer f.Close()
	n, err := f.Write([]byte(opts))
	if err != nil {
		return 0, 0, writeError(path, opts, err)
	}
	if n != len(opts) {
		return 0, 0, fmt.Errorf("%w: %s took %d of %d bytes of %q", ErrRejected, path, n, len(opts), opts)
	}
	reply, err := io.ReadAll(io.LimitReader(f, maxReply))
	if err != nil {
		return 0, 0, fmt.Errorf("%w: read %s: %w", ErrBadReply, path, err)
	}
	return parseReply(string(reply))
}

// writeError explains the errno of a rejected connect write; the errno
// meanings follow nvmf_create_ctrl and libnvme's __nvmf_add_ctrl.
func writeError(path, opts string, err error) error {
	var hint string
	switch {
	case errors.Is(err, syscall.EALREADY):
		return fmt.Errorf("%w: %q: %w", ErrAlreadyConnected, opts, err)
	case errors.Is(err, syscall.EINVAL):
		hint = "invalid options or transport module not loaded (modprobe nvme-tcp / nvme-rdma); see dmesg"
	case errors.Is(err, syscall.ECONNREFUSED):
		hint = "the target refused the connection"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ETIMEDOUT):
		hint = "the target is unreachable"
	case errors.Is(err, syscall.EADDRINUSE):
		hint = "host NQN or host ID already in use with other settings"
	case errors.Is(err, syscall.EIO):
		hint = "the target refused the connect command (host not allowed or subsystem unknown); see dmesg"
	default:
		hint = "see dmesg"
	}
	return fmt.Errorf("%w: write %q to %s: %w (%s)", ErrRejected, opts, path, err, hint)
}

// parseReply parses the kernel's answer "instance=N,cntlid=M\n"
// (fabrics.c nvmf_dev_show). The answer to a read before any controller
// was created is "instance=-1,cntlid=-1,<option list>", which is an error.
func parseReply(s string) (instance, cntlid int, err error) {
	bad := func(why string) error { return fmt.Errorf("%w: %q: %s", ErrBadReply, s, why) }
	instance, cntlid = -1, -1
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' }) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || (k != "instance" && k != "cntlid") {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, 0, bad(k + " is not a number")
		}
		if k == "instance" {
			instance = n
		} else {
			cntlid = n
		}
	}
	switch {
	case instance == -1 && cntlid == -1 && strings.Contains(s, "instance=-1"):
		return 0, 0, bad("the kernel reports no controller")
	case instance < 0:
		return 0, 0, bad("no instance=")
	case cntlid < 0:
		return 0, 0, bad("no cntlid=")
	}
	return instance, cntlid, nil
}

// waitNamespaces polls sysfs until controller name shows at least one
// namespace and the same set on two polls in a row: the kernel's scan
// work adds a target's namespaces one after another, so the first one
// seen need not be the last. If the wait ends while a non-empty set is
// still settling, that set is returned.
func (a *Attacher) waitNamespaces(ctx context.Context, name string) (Controller, error) {
	wait := a.NamespaceWait
	if wait <= 0 {
		wait = DefaultNamespaceWait
	}
	every := a.PollInterval
	if every <= 0 {
		every = 50 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var (
		last error
		seen Controller // last poll with namespaces
	)
	for {
		c, err := readController(a.sysfs(), name)
		switch {
		case err == nil && len(c.Namespaces) > 0:
			if sameNamespaces(seen.Namespaces, c.Namespaces) {
				return c, nil
			}
			seen = c
		case err == nil:
			seen = Controller{}
			last = fmt.Errorf("state %q, no namespace yet", c.State)
		case errors.Is(err, fs.ErrNotExist):
			seen = Controller{}
			last = fmt.Errorf("not in sysfs yet: %w", err)
		default:
			return Controller{}, err
		}
		select {
		case <-ctx.Done():
			if len(seen.Namespaces) > 0 {
				return seen, nil
			}
			return Controller{}, fmt.Errorf("%w: %w (last seen: %v)", ErrNoNamespaces, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func sameNamespaces(a, b []Namespace) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// existing finds the controller an EALREADY refers to, or the zero value.
func (a *Attacher) existing(t Target) Controller {
	cs, err := Discover(a.sysfs(), t.NQN)
	if err != nil {
		return Controller{}
	}
	for _, c := range cs {
		if c.Transport == t.Transport && sameAddr(c.TrAddr, t.Addr) && c.TrSvcID == strconv.Itoa(t.svcID()) {
			return c
		}
	}
	return Controller{}
}

// Detach deletes controller c, as `nvme disconnect` does: it writes "1" to
// <sysfs>/class/nvme/<c.Name>/delete_controller; the kernel removes the
// controller and its namespace block devices before the write returns.
// Errors: ctx already ended; c.Name not of the form "nvmeN"; ErrNoController
// when sysfs has no such controller; the write's error otherwise.
func (a *Attacher) Detach(ctx context.Context, c Controller) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fabric: detach %s: %w", c.Name, err)
	}
	if _, ok := ctrlInstance(c.Name); !ok {
		return fmt.Errorf("fabric: detach: %q is not a controller name (nvmeN)", c.Name)
	}
	return writeDelete(a.sysfs(), c.Name)
}

// writeDelete writes "1" to the controller's delete_controller attribute.
func writeDelete(root, name string) error {
	p := filepath.Join(root, "class", "nvme", name, "delete_controller")
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s (%s missing)", ErrNoController, name, p)
	}
	if err != nil {
		return fmt.Errorf("fabric: delete %s: %w", name, err)
	}
	_, err = f.Write([]byte("1"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fabric: delete %s: %w", name, err)
	}
	return nil
}

// sameAddr compares two IP address strings as addresses ("2001:DB8::1"
// equals "2001:db8::1"), falling back to string equality.
func sameAddr(a, b string) bool {
	x, err1 := netip.ParseAddr(a)
	y, err2 := netip.ParseAddr(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	return x.Unmap() == y.Unmap()
}
