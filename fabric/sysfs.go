package fabric

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Reading NVMe controllers and namespaces from sysfs. The layout (Linux
// drivers/nvme/host/core.c, multipath.c, fabrics.c; read, not copied;
// libnvme's tree scan walks it the same way):
//
//	class/nvme/nvmeC -> ../../devices/virtual/nvme-fabrics/ctl/nvmeC
//	    subsysnqn, state, transport, cntlid, address
//	    ("traddr=A,trsvcid=P[,host_traddr=..][,src_addr=..]"),
//	    delete_controller
//	    nvmeCnN/            namespace block device, without native multipath
//	    nvmeScCnN/          hidden per-controller path, with native multipath
//	class/nvme-subsystem/nvme-subsysS -> ../../devices/virtual/nvme-subsystem/nvme-subsysS
//	    subsysnqn, nvmeC -> (link to each controller)
//	    nvmeSnN/            multipath head: the block device /dev/nvmeSnN
//
// A block device directory holds size (in 512-byte sectors, whatever the
// logical block size), queue/logical_block_size (bytes) and nsid.

// Controller is one NVMe-oF controller as sysfs shows it.
type Controller struct {
	// Name is the controller's name, "nvmeN" (its char device is
	// /dev/nvmeN).
	Name string `json:"name"`
	// Instance is N in Name.
	Instance int `json:"instance"`
	// CntlID is the controller ID the target assigned.
	CntlID int `json:"cntlid"`
	// SubsysNQN is the subsystem's NQN.
	SubsysNQN string `json:"subsys_nqn"`
	// Subsystem is the kernel's subsystem name, "nvme-subsysS", or "" if
	// sysfs shows none.
	Subsystem string `json:"subsystem,omitempty"`
	// State is the kernel's controller state: "new", "live",
	// "resetting", "connecting", "deleting", "deleting (no IO)", "dead".
	State string `json:"state"`
	// Transport is "tcp", "rdma", "fc", "loop" or "pcie".
	Transport string `json:"transport"`
	// TrAddr and TrSvcID are the target address and port from the
	// address attribute ("" when absent, as for loop).
	TrAddr  string `json:"traddr,omitempty"`
	TrSvcID string `json:"trsvcid,omitempty"`
	// Namespaces are the namespace block devices reached through this
	// controller, sorted by NSID. With native multipath they are the
	// subsystem's shared heads, so two controllers (paths) to one
	// subsystem list the same devices.
	Namespaces []Namespace `json:"namespaces"`
}

// Namespace is one namespace block device.
type Namespace struct {
	// Name is the block device name, "nvmeSnN" (S is the subsystem
	// instance with native multipath, else the controller instance).
	Name string `json:"name"`
	// Dev is the device node, "/dev/" + Name.
	Dev string `json:"dev"`
	// NSID is the namespace ID (0 if sysfs lacks the nsid attribute).
	NSID uint32 `json:"nsid"`
	// SizeBytes is the capacity in bytes (sysfs size × 512).
	SizeBytes int64 `json:"size_bytes"`
	// LogicalBlockBytes is the logical block size in bytes: the O_DIRECT
	// alignment for offsets, lengths and buffers.
	LogicalBlockBytes int `json:"logical_block_bytes"`
	// Path is the hidden per-controller path device "nvmeScCnN" under
	// native multipath, "" without it.
	Path string `json:"path,omitempty"`
}

// Discover returns the NVMe controllers under sysfsRoot (normally "/sys")
// whose subsystem NQN is subsysNQN (all controllers if it is empty),
// sorted by instance, each with its namespace block devices. Controllers
// in every state are returned; check State. A controller that vanishes
// while being read is left out. No nvme class (module not loaded) gives
// an empty result. Errors: an unreadable directory or a malformed
// attribute (with its path).
func Discover(sysfsRoot, subsysNQN string) ([]Controller, error) {
	ents, err := os.ReadDir(filepath.Join(sysfsRoot, "class", "nvme"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fabric: list NVMe controllers: %w", err)
	}
	var out []Controller
	for _, e := range ents {
		if _, ok := ctrlInstance(e.Name()); !ok {
			continue
		}
		c, err := readController(sysfsRoot, e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if subsysNQN == "" || c.SubsysNQN == subsysNQN {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out, nil
}

// readController reads controller name ("nvmeN") and its namespaces.
// Errors wrap fs.ErrNotExist when the controller is absent.
func readController(root, name string) (Controller, error) {
	inst, ok := ctrlInstance(name)
	if !ok {
		return Controller{}, fmt.Errorf("fabric: %q is not a controller name", name)
	}
	dir := filepath.Join(root, "class", "nvme", name)
	c := Controller{Name: name, Instance: inst}
	var err error
	if c.SubsysNQN, err = attr(dir, "subsysnqn"); err != nil {
		return Controller{}, err
	}
	if c.State, err = attr(dir, "state"); err != nil {
		return Controller{}, err
	}
	if c.Transport, err = attr(dir, "transport"); err != nil {
		return Controller{}, err
	}
	if c.CntlID, err = intAttr(dir, "cntlid"); err != nil {
		return Controller{}, err
	}
	addr, err := attr(dir, "address")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Controller{}, err
	}
	c.TrAddr, c.TrSvcID = parseAddress(addr)
	if c.Subsystem, err = subsystemOf(root, name); err != nil {
		return Controller{}, err
	}
	if c.Namespaces, err = controllerNamespaces(root, dir); err != nil {
		return Controller{}, err
	}
	return c, nil
}

// parseAddress splits the address attribute (fabrics.c nvmf_get_address,
// tcp.c nvme_tcp_get_address) into traddr and trsvcid.
func parseAddress(s string) (traddr, trsvcid string) {
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' }) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "traddr":
			traddr = v
		case "trsvcid":
			trsvcid = v
		}
	}
	return traddr, trsvcid
}

// subsystemOf returns the nvme-subsystem directory holding a link to
// controller name, or "".
func subsystemOf(root, name string) (string, error) {
	base := filepath.Join(root, "class", "nvme-subsystem")
	ents, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("fabric: list NVMe subsystems: %w", err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "nvme-subsys") {
			continue
		}
		if _, err := os.Lstat(filepath.Join(base, e.Name(), name)); err == nil {
			return e.Name(), nil
		}
	}
	return "", nil
}

// controllerNamespaces lists the block devices reached through the
// controller at dir: its own nvmeCnN children, or, for each multipath
// path nvmeScCnN, the head nvmeSnN under class/nvme-subsystem/nvme-subsysS
// (a head not there yet is skipped).
func controllerNamespaces(root, dir string) ([]Namespace, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("fabric: read %s: %w", dir, err)
	}
	var out []Namespace
	for _, e := range ents {
		n := e.Name()
		if s, _, ns, ok := parsePathName(n); ok {
			head := "nvme" + strconv.Itoa(s) + "n" + strconv.Itoa(ns)
			hd := filepath.Join(root, "class", "nvme-subsystem", "nvme-subsys"+strconv.Itoa(s), head)
			b, err := readBlock(hd, head)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			b.Path = n
			out = append(out, b)
			continue
		}
		if _, _, ok := parseNsName(n); ok {
			b, err := readBlock(filepath.Join(dir, n), n)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].NSID != out[j].NSID {
			return out[i].NSID < out[j].NSID
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// readBlock reads one namespace block device directory.
func readBlock(dir, name string) (Namespace, error) {
	sectors, err := int64Attr(dir, "size")
	if err != nil {
		return Namespace{}, err
	}
	lbs, err := intAttr(dir, filepath.Join("queue", "logical_block_size"))
	if err != nil {
		return Namespace{}, err
	}
	if lbs < 512 || lbs&(lbs-1) != 0 {
		return Namespace{}, fmt.Errorf("fabric: %s/queue/logical_block_size %d is not a power of two >= 512", dir, lbs)
	}
	var nsid uint32
	s, err := attr(dir, "nsid")
	switch {
	case err == nil:
		v, perr := strconv.ParseUint(s, 10, 32)
		if perr != nil {
			return Namespace{}, fmt.Errorf("fabric: %s/nsid: %q is not a number", dir, s)
		}
		nsid = uint32(v)
	case !errors.Is(err, fs.ErrNotExist):
		return Namespace{}, err
	}
	return Namespace{Name: name, Dev: "/dev/" + name, NSID: nsid, SizeBytes: sectors * 512, LogicalBlockBytes: lbs}, nil
}

// attr reads one sysfs attribute, without surrounding whitespace.
func attr(dir, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "", fmt.Errorf("fabric: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func intAttr(dir, name string) (int, error) {
	v, err := int64Attr(dir, name)
	return int(v), err
}

func int64Attr(dir, name string) (int64, error) {
	s, err := attr(dir, name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("fabric: %s: %q is not a non-negative number", filepath.Join(dir, name), s)
	}
	return v, nil
}

// ctrlInstance parses "nvmeN".
func ctrlInstance(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "nvme")
	if !ok {
		return 0, false
	}
	return atoiStrict(rest)
}

// parseNsName parses "nvmeXnY".
func parseNsName(name string) (x, y int, ok bool) {
	rest, ok := strings.CutPrefix(name, "nvme")
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(rest, "n")
	if !ok {
		return 0, 0, false
	}
	x, ok1 := atoiStrict(a)
	y, ok2 := atoiStrict(b)
	return x, y, ok1 && ok2
}

// parsePathName parses the multipath path name "nvmeScCnN".
func parsePathName(name string) (s, c, n int, ok bool) {
	rest, ok := strings.CutPrefix(name, "nvme")
	if !ok {
		return 0, 0, 0, false
	}
	a, rest, ok := strings.Cut(rest, "c")
	if !ok {
		return 0, 0, 0, false
	}
	b, d, ok := strings.Cut(rest, "n")
	if !ok {
		return 0, 0, 0, false
	}
	s, ok1 := atoiStrict(a)
	c, ok2 := atoiStrict(b)
	n, ok3 := atoiStrict(d)
	return s, c, n, ok1 && ok2 && ok3
}

// atoiStrict parses a non-empty run of decimal digits.
func atoiStrict(s string) (int, bool) {
	if !allDigits(s) || len(s) > 9 {
		return 0, false
	}
	v, err := strconv.Atoi(s)
	return v, err == nil
}
