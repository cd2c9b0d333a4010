package fabric

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:2f8c0d4e-6a1b-4c3d-9e5f-0a1b2c3d4e5f"

// TestOptionString pins the connect request to what nvme-cli writes for
// the same arguments (libnvme build_options: nqn first, then transport,
// traddr, trsvcid, hostnqn, hostid, nr_io_queues, queue_size,
// keep_alive_tmo, reconnect_delay, ctrl_loss_tmo; ctrl_loss_tmo=600 and
// trsvcid=4420 by default).
func TestOptionString(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    Target
		want string
	}{
		{"minimal: nvme connect -t tcp -a 192.0.2.10 -n NQN",
			Target{Transport: "tcp", Addr: "192.0.2.10", NQN: poolNQN},
			"nqn=" + poolNQN + ",transport=tcp,traddr=192.0.2.10,trsvcid=4420,ctrl_loss_tmo=600"},
		{"every option",
			Target{Transport: "tcp", Addr: "192.0.2.10", SvcID: 4421, NQN: poolNQN, HostNQN: testHostNQN,
				HostID: "2f8c0d4e-6a1b-4c3d-9e5f-0a1b2c3d4e5f", NrIOQueues: 4, QueueSize: 256,
				CtrlLossTmo: 30, ReconnectDelay: 2, KeepAliveTmo: 7},
			"nqn=" + poolNQN + ",transport=tcp,traddr=192.0.2.10,trsvcid=4421,hostnqn=" + testHostNQN +
				",hostid=2f8c0d4e-6a1b-4c3d-9e5f-0a1b2c3d4e5f,nr_io_queues=4,queue_size=256," +
				"keep_alive_tmo=7,reconnect_delay=2,ctrl_loss_tmo=30"},
		{"rdma, IPv6 canonicalised, reconnect forever",
			Target{Transport: "rdma", Addr: "2001:DB8:0::10", NQN: poolNQN, CtrlLossTmo: CtrlLossForever},
			"nqn=" + poolNQN + ",transport=rdma,traddr=2001:db8::10,trsvcid=4420,ctrl_loss_tmo=-1"},
		{"no reconnect, IPv4-mapped address unmapped",
			Target{Transport: "tcp", Addr: "::ffff:192.0.2.10", NQN: poolNQN, CtrlLossTmo: CtrlLossNoReconnect},
			"nqn=" + poolNQN + ",transport=tcp,traddr=192.0.2.10,trsvcid=4420,ctrl_loss_tmo=0"},
		{"link-local with zone",
			Target{Transport: "tcp", Addr: "fe80::1%eth0", NQN: poolNQN, HostNQN: testHostNQN},
			"nqn=" + poolNQN + ",transport=tcp,traddr=fe80::1%eth0,trsvcid=4420,hostnqn=" + testHostNQN + ",ctrl_loss_tmo=600"},
	} {
		if err := tc.t.Validate(); err != nil {
			t.Errorf("%s: Validate: %v", tc.name, err)
		}
		if got := tc.t.OptionString(); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestTargetValidate(t *testing.T) {
	ok := Target{Transport: "tcp", Addr: "192.0.2.10", NQN: poolNQN}
	for _, tc := range []struct {
		mod  func(*Target)
		want string
	}{
		{func(t *Target) { t.Transport = "" }, "no transport"},
		{func(t *Target) { t.Transport = "fc" }, `transport "fc" not supported`},
		{func(t *Target) { t.Transport = "TCP" }, "not supported"},
		{func(t *Target) { t.Addr = "" }, "no target address"},
		{func(t *Target) { t.Addr = "pool.example.com" }, "not an IP address"},
		{func(t *Target) { t.Addr = "192.0.2.300" }, "not an IP address"},
		{func(t *Target) { t.Addr = "0.0.0.0" }, "cannot be a target port"},
		{func(t *Target) { t.Addr = "ff02::1" }, "cannot be a target port"},
		{func(t *Target) { t.SvcID = 65536 }, "port 65536"},
		{func(t *Target) { t.SvcID = -1 }, "port -1"},
		{func(t *Target) { t.NQN = "" }, "NQN is empty"},
		{func(t *Target) { t.NQN = DiscoveryNQN }, "discovery subsystem"},
		{func(t *Target) { t.NQN = "iqn.2024-01.io.ctxmem:pool0" }, `start with "nqn."`},
		{func(t *Target) { t.HostNQN = "nqn.2024-01.io.ctxmem" }, "host NQN"},
		{func(t *Target) { t.HostID = "not-a-uuid" }, "host ID"},
		{func(t *Target) { t.HostID = "2f8c0d4e6a1b4c3d9e5f0a1b2c3d4e5f" }, "host ID"},
		{func(t *Target) { t.NrIOQueues = -1 }, "nr_io_queues"},
		{func(t *Target) { t.QueueSize = 8 }, "queue_size 8 outside 16..1024"},
		{func(t *Target) { t.QueueSize = 2048 }, "queue_size 2048"},
		{func(t *Target) { t.CtrlLossTmo = -3 }, "ctrl_loss_tmo"},
		{func(t *Target) { t.ReconnectDelay = -1 }, "reconnect_delay"},
		{func(t *Target) { t.KeepAliveTmo = -5 }, "keep_alive_tmo"},
	} {
		tg := ok
		tc.mod(&tg)
		err := tg.Validate()
		if !errors.Is(err, ErrInvalidTarget) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate = %v; want ErrInvalidTarget mentioning %q", tg, err, tc.want)
		}
	}
	for _, good := range []Target{
		ok,
		{Transport: "rdma", Addr: "2001:db8::10", SvcID: 4420, NQN: poolNQN, QueueSize: 16, CtrlLossTmo: CtrlLossNoReconnect},
		{Transport: "tcp", Addr: "198.51.100.7", NQN: poolNQN, QueueSize: 1024, HostNQN: testHostNQN,
			HostID: "2F8C0D4E-6A1B-4C3D-9E5F-0A1B2C3D4E5F"},
	} {
		if err := good.Validate(); err != nil {
			t.Errorf("%+v: %v", good, err)
		}
	}
}

func TestValidateNQN(t *testing.T) {
	valid := []string{
		"nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
		"nqn.2016-06.io.spdk:cnode1",
		"nqn.2014-08.com.example:nvme:nvm-subsystem-sn-d78432",
		"nqn.2024-12.io.ctxmem:pool0:extent=α", // any UTF-8 after ':'
		DiscoveryNQN,
		"nqn.2024-01.io.ctxmem:" + strings.Repeat("x", maxKernelNQNBytes-len("nqn.2024-01.io.ctxmem:")),
	}
	for _, s := range valid {
		if err := ValidateNQN(s); err != nil {
			t.Errorf("ValidateNQN(%q): %v", s, err)
		}
	}
	for _, tc := range []struct{ nqn, want string }{
		{"", "empty"},
		{"nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf", "not a UUID"},
		{"nqn.2014-08.org.nvmexpress:uuid:g81d4fae-7dec-11d0-a765-00a0c91e6bf6", "not a UUID"},
		{"nqn.2014.08.org.nvmexpress:80868086PHKS", "date"}, // what some PCIe drives report
		{"nqn.2014-13.com.example:x", "date"},
		{"nqn.2014-00.com.example:x", "date"},
		{"nqn.14-08.com.example:x", "date"},
		{"nqn.2014-08.com.example", `":"`},
		{"nqn.2014-08.com.example:", "empty name"},
		{"nqn.2014-08.example:x", "at least two labels"},
		{"nqn.2014-08.com..example:x", "domain label"},
		{"nqn.2014-08.com.-example:x", "domain label"},
		{"nqn.2014-08.com.exa_mple:x", "domain label"},
		{"nqn.2024-01.io.ctxmem:a,b", "contains ','"},
		{"nqn.2024-01.io.ctxmem:a b", "contains ' '"},
		{"nqn.2024-01.io.ctxmem:a\n", "contains '\\n'"},
		{"nqn.2024-01.io.ctxmem:\xff", "UTF-8"},
		{"testnqn", `start with "nqn."`},
		{"nqn.2024-01.io.ctxmem:" + strings.Repeat("x", MaxNQNBytes-len("nqn.2024-01.io.ctxmem:")), "Linux accepts at most 222"},
		{"nqn.2024-01.io.ctxmem:" + strings.Repeat("x", MaxNQNBytes+1-len("nqn.2024-01.io.ctxmem:")), "more than the 223"},
	} {
		err := ValidateNQN(tc.nqn)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateNQN(%q) = %v; want an error mentioning %q", tc.nqn, err, tc.want)
		}
	}
}

func TestParseReply(t *testing.T) {
	for _, tc := range []struct {
		in       string
		inst, id int
	}{
		{"instance=3,cntlid=1\n", 3, 1},
		{"instance=12,cntlid=65519", 12, 65519},
		{"cntlid=2,instance=0\n", 0, 2},
	} {
		i, c, err := parseReply(tc.in)
		if err != nil || i != tc.inst || c != tc.id {
			t.Errorf("parseReply(%q) = %d, %d, %v", tc.in, i, c, err)
		}
	}
	for _, bad := range []string{
		"",
		"\n",
		"instance=x,cntlid=1\n",
		"instance=3\n",
		"cntlid=3\n",
		"instance=-1,cntlid=-1,transport=%s,traddr=%s,trsvcid=%s,nqn=%s\n",
	} {
		if _, _, err := parseReply(bad); !errors.Is(err, ErrBadReply) {
			t.Errorf("parseReply(%q) = %v; want ErrBadReply", bad, err)
		}
	}
}

// fakeKernel stands in for /dev/nvme-fabrics: it records what was written
// and answers like fabrics.c (nvmf_dev_write, nvmf_dev_show).
type fakeKernel struct {
	mu       sync.Mutex
	opens    int
	closes   int
	written  []string
	writeErr error  // returned by Write instead of creating a controller
	reply    string // answer to a read after a successful write
	onWrite  func(opts string)
}

func (k *fakeKernel) Open(path string) (io.ReadWriteCloser, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.opens++
	return &fakeFile{k: k, path: path}, nil
}

type fakeFile struct {
	k       *fakeKernel
	path    string
	created bool
	unread  []byte
	replied bool
}

func (f *fakeFile) Write(p []byte) (int, error) {
	f.k.mu.Lock()
	f.k.written = append(f.k.written, string(p))
	werr, on := f.k.writeErr, f.k.onWrite
	f.k.mu.Unlock()
	if f.created {
		return 0, &fs.PathError{Op: "write", Path: f.path, Err: syscall.EINVAL}
	}
	if werr != nil {
		return 0, &fs.PathError{Op: "write", Path: f.path, Err: werr}
	}
	f.created = true
	if on != nil {
		on(string(p))
	}
	return len(p), nil
}

func (f *fakeFile) Read(p []byte) (int, error) {
	if !f.replied {
		f.replied = true
		if f.created {
			f.unread = []byte(f.k.reply)
		} else {
			f.unread = []byte("instance=-1,cntlid=-1,transport=%s,traddr=%s,nqn=%s\n")
		}
	}
	if len(f.unread) == 0 {
		return 0, io.EOF
	}
	n := copy(p, f.unread)
	f.unread = f.unread[n:]
	return n, nil
}

func (f *fakeFile) Close() error {
	f.k.mu.Lock()
	defer f.k.mu.Unlock()
	f.k.closes++
	return nil
}

func (k *fakeKernel) writes() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.written...)
}

func testTarget() Target {
	return Target{Transport: "tcp", Addr: "192.0.2.10", NQN: poolNQN, HostNQN: testHostNQN, CtrlLossTmo: 60}
}

// TestAttachWaitsForNamespaces: the kernel creates controller nvme4 at the
// write and its namespaces a little later; Attach must wait for them.
func TestAttachWaitsForNamespaces(t *testing.T) {
	root := t.TempDir()
	sys := newFakeSysfs(t, root)
	var wg sync.WaitGroup
	defer wg.Wait()
	k := &fakeKernel{reply: "instance=4,cntlid=7\n"}
	k.onWrite = func(string) {
		const addr = "traddr=192.0.2.10,trsvcid=4420,src_addr=192.0.2.1"
		sys.ctrl(4, 7, poolNQN, "live", "tcp", addr)
		sys.subsys(4, poolNQN, 4)
		wg.Add(1)
		go func() { // the kernel's namespace scan work
			defer wg.Done()
			time.Sleep(150 * time.Millisecond)
			sys.stage("nvme4.scanned", 7, poolNQN, "live", "tcp", addr)
			sys.ns("nvme4.scanned", "nvme4n2", 2, 4096, 4096)
			sys.ns("nvme4.scanned", "nvme4n1", 1, 2097152, 512)
			sys.publish(4, "nvme4.scanned")
		}()
	}
	a := &Attacher{SysfsRoot: root, Device: k, PollInterval: 10 * time.Millisecond}
	c, err := a.Attach(context.Background(), testTarget())
	if err != nil {
		t.Fatal(err)
	}
	if w := k.writes(); len(w) != 1 || w[0] != testTarget().OptionString() {
		t.Fatalf("wrote %q, want one write of %q", w, testTarget().OptionString())
	}
	if k.opens != 1 || k.closes != 1 {
		t.Errorf("device opened %d, closed %d times", k.opens, k.closes)
	}
	if c.Name != "nvme4" || c.Instance != 4 || c.CntlID != 7 || c.SubsysNQN != poolNQN || c.State != "live" ||
		c.Transport != "tcp" || c.TrAddr != "192.0.2.10" || c.TrSvcID != "4420" || c.Subsystem != "nvme-subsys4" {
		t.Errorf("controller %+v", c)
	}
	want := []Namespace{
		{Name: "nvme4n1", Dev: "/dev/nvme4n1", NSID: 1, SizeBytes: 1 << 30, LogicalBlockBytes: 512},
		{Name: "nvme4n2", Dev: "/dev/nvme4n2", NSID: 2, SizeBytes: 4096 * 512, LogicalBlockBytes: 4096},
	}
	if !reflect.DeepEqual(c.Namespaces, want) {
		t.Fatalf("namespaces\n got %+v\nwant %+v", c.Namespaces, want)
	}
}

// TestAttachMultipathWaitsForHead: with native multipath the path device
// shows up under the controller before the head block device exists;
// Attach must return the head, not the hidden path.
func TestAttachMultipathWaitsForHead(t *testing.T) {
	root := t.TempDir()
	sys := newFakeSysfs(t, root)
	var wg sync.WaitGroup
	defer wg.Wait()
	k := &fakeKernel{reply: "instance=5,cntlid=2\n"}
	k.onWrite = func(string) {
		// Second path to an existing subsystem nvme-subsys1.
		sys.ctrl(5, 2, poolNQN, "live", "tcp", "traddr=192.0.2.10,trsvcid=4420")
		sys.subsys(1, poolNQN, 5)
		sys.path(1, 5, 1, 1, 2048, 512)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(100 * time.Millisecond)
			sys.head(1, 1, 1, 2048, 512)
		}()
	}
	a := &Attacher{SysfsRoot: root, Device: k, PollInterval: 10 * time.Millisecond}
	c, err := a.Attach(context.Background(), testTarget())
	if err != nil {
		t.Fatal(err)
	}
	want := []Namespace{{Name: "nvme1n1", Dev: "/dev/nvme1n1", NSID: 1, SizeBytes: 2048 * 512, LogicalBlockBytes: 512, Path: "nvme1c5n1"}}
	if len(c.Namespaces) != 1 || c.Namespaces[0] != want[0] || c.Subsystem != "nvme-subsys1" {
		t.Fatalf("got %+v, want namespaces %+v in nvme-subsys1", c, want)
	}
}

// TestAttachNamespacesNeverAppear: the wait ends, Attach says so and
// deletes the controller it created.
func TestAttachNamespacesNeverAppear(t *testing.T) {
	root := t.TempDir()
	sys := newFakeSysfs(t, root)
	k := &fakeKernel{reply: "instance=0,cntlid=1\n"}
	k.onWrite = func(string) { sys.ctrl(0, 1, poolNQN, "live", "tcp", "traddr=192.0.2.10,trsvcid=4420") }
	a := &Attacher{SysfsRoot: root, Device: k, PollInterval: 10 * time.Millisecond, NamespaceWait: 200 * time.Millisecond}
	_, err := a.Attach(context.Background(), testTarget())
	if !errors.Is(err, ErrNoNamespaces) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Attach = %v; want ErrNoNamespaces after the deadline", err)
	}
	if !strings.Contains(err.Error(), "nvme0") || !strings.Contains(err.Error(), `state "live"`) {
		t.Errorf("error does not say which controller or what was seen: %v", err)
	}
	b, rerr := os.ReadFile(filepath.Join(root, "devices/virtual/nvme-fabrics/ctl/nvme0/delete_controller"))
	if rerr != nil || string(b) != "1" {
		t.Fatalf("delete_controller holds %q (%v); want \"1\"", b, rerr)
	}

	// The caller's ctx ending stops the wait the same way.
	ctx, cancel := context.WithCancel(context.Background())
	k.onWrite = func(string) {
		sys.ctrl(1, 1, poolNQN, "live", "tcp", "traddr=192.0.2.11,trsvcid=4420")
		cancel()
	}
	k.reply = "instance=1,cntlid=1\n"
	a.NamespaceWait = 0
	if _, err := a.Attach(ctx, testTarget()); !errors.Is(err, ErrNoNamespaces) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Attach with ctx cancelled during the wait = %v", err)
	}
}

func TestAttachKernelRejects(t *testing.T) {
	for _, tc := range []struct {
		errno    syscall.Errno
		sentinel error
		hint     string
	}{
		{syscall.EINVAL, ErrRejected, "modprobe nvme-tcp"},
		{syscall.ECONNREFUSED, ErrRejected, "refused"},
		{syscall.EADDRINUSE, ErrRejected, "host NQN"},
		{syscall.EIO, ErrRejected, "host not allowed"},
		{syscall.ENOMEM, ErrRejected, "dmesg"},
		{syscall.EALREADY, ErrAlreadyConnected, "already"},
	} {
		root := t.TempDir()
		k := &fakeKernel{writeErr: tc.errno}
		a := &Attacher{SysfsRoot: root, Device: k}
		c, err := a.Attach(context.Background(), testTarget())
		if !errors.Is(err, tc.sentinel) || !errors.Is(err, tc.errno) || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("%v: Attach = %v; want %v wrapping the errno, mentioning %q", tc.errno, err, tc.sentinel, tc.hint)
		}
		if c.Name != "" {
			t.Errorf("%v: returned controller %+v", tc.errno, c)
		}
	}
}

// TestAttachAlreadyConnected: on EALREADY the existing controller is
// returned with the error, found by transport, address and port.
func TestAttachAlreadyConnected(t *testing.T) {
	root := t.TempDir()
	sys := newFakeSysfs(t, root)
	sys.ctrl(0, 1, poolNQN, "live", "tcp", "traddr=198.51.100.10,trsvcid=4420")
	sys.ns("nvme0", "nvme0n1", 1, 2048, 512)
	sys.ctrl(1, 2, poolNQN, "live", "tcp", "traddr=192.0.2.10,trsvcid=4420,src_addr=192.0.2.1")
	sys.ns("nvme1", "nvme1n1", 1, 2048, 512)
	k := &fakeKernel{writeErr: syscall.EALREADY}
	a := &Attacher{SysfsRoot: root, Device: k}
	c, err := a.Attach(context.Background(), testTarget())
	if !errors.Is(err, ErrAlreadyConnected) {
		t.Fatalf("Attach = %v", err)
	}
	if c.Name != "nvme1" || len(c.Namespaces) != 1 || c.Namespaces[0].Name != "nvme1n1" {
		t.Fatalf("existing controller %+v; want nvme1", c)
	}
}

func TestAttachMalformedReply(t *testing.T) {
	for _, reply := range []string{"", "instance=4\n", "instance=four,cntlid=1\n"} {
		k := &fakeKernel{reply: reply}
		a := &Attacher{SysfsRoot: t.TempDir(), Device: k}
		if _, err := a.Attach(context.Background(), testTarget()); !errors.Is(err, ErrBadReply) {
			t.Errorf("reply %q: Attach = %v; want ErrBadReply", reply, err)
		}
	}
}

func TestAttachInvalidTargetWritesNothing(t *testing.T) {
	k := &fakeKernel{reply: "instance=0,cntlid=1\n"}
	a := &Attacher{SysfsRoot: t.TempDir(), Device: k}
	bad := testTarget()
	bad.NQN = "nqn.2024-01.io.ctxmem:a,transport=rdma"
	if _, err := a.Attach(context.Background(), bad); !errors.Is(err, ErrInvalidTarget) {
		t.Fatalf("Attach = %v; want ErrInvalidTarget", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Attach(ctx, testTarget()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Attach with an ended ctx = %v", err)
	}
	if k.opens != 0 {
		t.Fatalf("device opened %d times", k.opens)
	}
}

// TestAttachRealDeviceMissing uses the default CharDevice on a path that
// does not exist, as on a host without the nvme-fabrics module.
func TestAttachRealDeviceMissing(t *testing.T) {
	a := &Attacher{DevicePath: filepath.Join(t.TempDir(), "nvme-fabrics"), SysfsRoot: t.TempDir()}
	_, err := a.Attach(context.Background(), testTarget())
	if !errors.Is(err, ErrNoFabrics) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "modprobe nvme-fabrics") {
		t.Fatalf("Attach = %v; want ErrNoFabrics telling to modprobe nvme-fabrics", err)
	}
}

// TestAttachRealDeviceOnFile drives CharDevice against a regular file: the
// whole option string lands in one write, and the file (which, unlike the
// kernel, answers nothing) yields ErrBadReply.
func TestAttachRealDeviceOnFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nvme-fabrics")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a := &Attacher{DevicePath: p, SysfsRoot: t.TempDir()}
	if _, err := a.Attach(context.Background(), testTarget()); !errors.Is(err, ErrBadReply) {
		t.Fatalf("Attach = %v; want ErrBadReply", err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != testTarget().OptionString() {
		t.Fatalf("device received %q (%v), want %q", b, err, testTarget().OptionString())
	}
}

func TestDetach(t *testing.T) {
	root := t.TempDir()
	sys := newFakeSysfs(t, root)
	sys.ctrl(3, 1, poolNQN, "live", "tcp", "traddr=192.0.2.10,trsvcid=4420")
	a := &Attacher{SysfsRoot: root}
	if err := a.Detach(context.Background(), Controller{Name: "nvme3"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "devices/virtual/nvme-fabrics/ctl/nvme3/delete_controller"))
	if err != nil || string(b) != "1" {
		t.Fatalf("delete_controller holds %q (%v); want \"1\"", b, err)
	}
	if err := a.Detach(context.Background(), Controller{Name: "nvme9"}); !errors.Is(err, ErrNoController) {
		t.Fatalf("Detach(nvme9) = %v; want ErrNoController", err)
	}
	for _, bad := range []string{"", "../nvme3", "nvme3/..", "nvme-subsys3", "nvme3n1"} {
		if err := a.Detach(context.Background(), Controller{Name: bad}); err == nil {
			t.Errorf("Detach(%q) succeeded", bad)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Detach(ctx, Controller{Name: "nvme3"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Detach with an ended ctx = %v", err)
	}
}
