package fabric

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

const poolNQN = "nqn.2024-01.io.ctxmem:pool0"

const (
	gib = int64(1) << 30
)

func TestDiscoverTCP(t *testing.T) {
	root := filepath.Join("testdata", "sysfs-tcp")
	if fi, err := os.Lstat(filepath.Join(root, "class", "nvme", "nvme0")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("testdata class/nvme/nvme0 should be a symlink as in sysfs (checkout lost it?): %v %v", fi, err)
	}
	got, err := Discover(root, poolNQN)
	if err != nil {
		t.Fatal(err)
	}
	want := []Controller{{
		Name: "nvme0", Instance: 0, CntlID: 1, SubsysNQN: poolNQN, Subsystem: "nvme-subsys0",
		State: "live", Transport: "tcp", TrAddr: "192.0.2.10", TrSvcID: "4420",
		Namespaces: []Namespace{
			{Name: "nvme0n1", Dev: "/dev/nvme0n1", NSID: 1, SizeBytes: 1 * gib, LogicalBlockBytes: 512},
			{Name: "nvme0n2", Dev: "/dev/nvme0n2", NSID: 2, SizeBytes: 8 * gib, LogicalBlockBytes: 4096},
		},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Discover:\n got %+v\nwant %+v", got, want)
	}
}

func TestDiscoverMultipath(t *testing.T) {
	got, err := Discover(filepath.Join("testdata", "sysfs-multipath"), poolNQN)
	if err != nil {
		t.Fatal(err)
	}
	n1 := Namespace{Name: "nvme2n1", Dev: "/dev/nvme2n1", NSID: 1, SizeBytes: 8 * gib, LogicalBlockBytes: 4096}
	n2 := Namespace{Name: "nvme2n2", Dev: "/dev/nvme2n2", NSID: 3, SizeBytes: 1 * gib, LogicalBlockBytes: 512}
	p := func(n Namespace, path string) Namespace { n.Path = path; return n }
	want := []Controller{
		{Name: "nvme2", Instance: 2, CntlID: 1, SubsysNQN: poolNQN, Subsystem: "nvme-subsys2",
			State: "live", Transport: "tcp", TrAddr: "192.0.2.10", TrSvcID: "4420",
			Namespaces: []Namespace{p(n1, "nvme2c2n1"), p(n2, "nvme2c2n2")}},
		{Name: "nvme3", Instance: 3, CntlID: 2, SubsysNQN: poolNQN, Subsystem: "nvme-subsys2",
			State: "live", Transport: "tcp", TrAddr: "198.51.100.10", TrSvcID: "4420",
			Namespaces: []Namespace{p(n1, "nvme2c3n1")}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Discover:\n got %+v\nwant %+v", got, want)
	}
}

func TestDiscoverConnecting(t *testing.T) {
	got, err := Discover(filepath.Join("testdata", "sysfs-connecting"), poolNQN)
	if err != nil {
		t.Fatal(err)
	}
	want := []Controller{{
		Name: "nvme0", Instance: 0, CntlID: 1, SubsysNQN: poolNQN, Subsystem: "nvme-subsys0",
		State: "connecting", Transport: "tcp", TrAddr: "192.0.2.10", TrSvcID: "4420",
		Namespaces: []Namespace{{Name: "nvme0n1", Dev: "/dev/nvme0n1", NSID: 1, SizeBytes: 1 * gib,
			LogicalBlockBytes: 512, Path: "nvme0c0n1"}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Discover:\n got %+v\nwant %+v", got, want)
	}
}

func TestDiscoverNoMatch(t *testing.T) {
	root := filepath.Join("testdata", "sysfs-nomatch")
	got, err := Discover(root, poolNQN)
	if err != nil || len(got) != 0 {
		t.Fatalf("Discover(pool) = %+v, %v; want none", got, err)
	}
	all, err := Discover(root, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Name != "nvme0" || all[1].Name != "nvme1" {
		t.Fatalf("Discover(all) = %+v; want nvme0, nvme1", all)
	}
	if l := all[1]; l.Transport != "loop" || l.TrAddr != "" || l.TrSvcID != "" || l.SubsysNQN != "nqn.2024-01.io.ctxmem:loopback" ||
		len(l.Namespaces) != 1 || l.Namespaces[0].SizeBytes != 512<<20 {
		t.Fatalf("loop controller read as %+v", l)
	}
	other, err := Discover(root, "nqn.2024-01.io.ctxmem:other")
	if err != nil || len(other) != 1 || other[0].Name != "nvme0" || other[0].TrAddr != "203.0.113.7" {
		t.Fatalf("Discover(other) = %+v, %v", other, err)
	}
}

func TestDiscoverNoNVMeClass(t *testing.T) {
	got, err := Discover(t.TempDir(), poolNQN)
	if err != nil || got != nil {
		t.Fatalf("Discover on a sysfs without nvme = %+v, %v; want nil, nil", got, err)
	}
}

func TestDiscoverMalformedAttributes(t *testing.T) {
	for _, tc := range []struct{ file, value, want string }{
		{"cntlid", "abc\n", "cntlid"},
		{"nvme0n1/size", "12x\n", "size"},
		{"nvme0n1/queue/logical_block_size", "1000\n", "logical_block_size"},
		{"nvme0n1/nsid", "-1\n", "nsid"},
	} {
		root := t.TempDir()
		fs := newFakeSysfs(t, root)
		fs.ctrl(0, 1, poolNQN, "live", "tcp", "traddr=192.0.2.10,trsvcid=4420")
		fs.ns("nvme0", "nvme0n1", 1, 2048, 512)
		writeFile(t, filepath.Join(root, "devices/virtual/nvme-fabrics/ctl/nvme0", tc.file), tc.value)
		_, err := Discover(root, poolNQN)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%q: err %v, want one naming %s", tc.file, tc.value, err, tc.want)
		}
	}
}

func TestDiscoverSkipsVanishedController(t *testing.T) {
	root := t.TempDir()
	fs := newFakeSysfs(t, root)
	fs.ctrl(0, 1, poolNQN, "live", "tcp", "traddr=192.0.2.10,trsvcid=4420")
	fs.ns("nvme0", "nvme0n1", 1, 2048, 512)
	fs.ctrl(1, 2, poolNQN, "deleting", "tcp", "traddr=192.0.2.11,trsvcid=4420")
	// nvme1's device directory is gone but its class link remains, as
	// while the kernel tears it down.
	if err := os.RemoveAll(filepath.Join(root, "devices/virtual/nvme-fabrics/ctl/nvme1")); err != nil {
		t.Fatal(err)
	}
	got, err := Discover(root, poolNQN)
	if err != nil || len(got) != 1 || got[0].Name != "nvme0" {
		t.Fatalf("Discover = %+v, %v; want nvme0 only", got, err)
	}
}

func TestSysfsNames(t *testing.T) {
	if i, ok := ctrlInstance("nvme12"); !ok || i != 12 {
		t.Errorf("ctrlInstance(nvme12) = %d, %v", i, ok)
	}
	for _, bad := range []string{"nvme", "nvme-subsys0", "nvme0n1", "nvme-1", "ng0", "nvme+1"} {
		if _, ok := ctrlInstance(bad); ok {
			t.Errorf("ctrlInstance(%q) accepted", bad)
		}
	}
	if x, y, ok := parseNsName("nvme3n17"); !ok || x != 3 || y != 17 {
		t.Errorf("parseNsName(nvme3n17) = %d %d %v", x, y, ok)
	}
	for _, bad := range []string{"nvme0n1p1", "nvme0c0n1", "ng0n1", "nvme0n", "nvmen1", "nvme0"} {
		if _, _, ok := parseNsName(bad); ok {
			t.Errorf("parseNsName(%q) accepted", bad)
		}
	}
	if s, c, n, ok := parsePathName("nvme2c3n1"); !ok || s != 2 || c != 3 || n != 1 {
		t.Errorf("parsePathName(nvme2c3n1) = %d %d %d %v", s, c, n, ok)
	}
	for _, bad := range []string{"nvme2n1", "nvme2c3", "nvme2c3n", "nvmec3n1", "nvme2c3n1p2"} {
		if _, _, _, ok := parsePathName(bad); ok {
			t.Errorf("parsePathName(%q) accepted", bad)
		}
	}
	if a, p := parseAddress("traddr=fe80::1%eth0,trsvcid=4420,host_iface=eth0,src_addr=fe80::2\n"); a != "fe80::1%eth0" || p != "4420" {
		t.Errorf("parseAddress = %q %q", a, p)
	}
}

// fakeSysfs builds, under a test's temporary directory, the same layout
// the recorded trees in testdata have (see testdata/README.md).
type fakeSysfs struct {
	t    *testing.T
	root string
}

func newFakeSysfs(t *testing.T, root string) *fakeSysfs { return &fakeSysfs{t: t, root: root} }

func (f *fakeSysfs) ctrlDir(dir string) string {
	return filepath.Join(f.root, "devices/virtual/nvme-fabrics/ctl", dir)
}

// ctrl adds controller nvme<inst> and its class link.
func (f *fakeSysfs) ctrl(inst, cntlid int, nqn, state, transport, address string) {
	name := "nvme" + strconv.Itoa(inst)
	f.stage(name, cntlid, nqn, state, transport, address)
	f.publish(inst, name)
}

// stage writes a controller's attributes into device directory dir
// without linking it from class/nvme.
func (f *fakeSysfs) stage(dir string, cntlid int, nqn, state, transport, address string) {
	d := f.ctrlDir(dir)
	writeFile(f.t, filepath.Join(d, "subsysnqn"), nqn+"\n")
	writeFile(f.t, filepath.Join(d, "state"), state+"\n")
	writeFile(f.t, filepath.Join(d, "transport"), transport+"\n")
	writeFile(f.t, filepath.Join(d, "address"), address+"\n")
	writeFile(f.t, filepath.Join(d, "cntlid"), strconv.Itoa(cntlid)+"\n")
	writeFile(f.t, filepath.Join(d, "delete_controller"), "")
}

// publish points class/nvme/nvme<inst> at device directory dir, replacing
// any previous link in one rename so a reader sees the old directory or
// the new one, never a mix.
func (f *fakeSysfs) publish(inst int, dir string) {
	link := filepath.Join(f.root, "class/nvme", "nvme"+strconv.Itoa(inst))
	tmp := link + ".new"
	symlink(f.t, "../../devices/virtual/nvme-fabrics/ctl/"+dir, tmp)
	if err := os.Rename(tmp, link); err != nil {
		f.t.Error(err)
	}
}

// subsys adds nvme-subsys<s> with NQN nqn, linking controllers ctrls.
func (f *fakeSysfs) subsys(s int, nqn string, ctrls ...int) {
	name := "nvme-subsys" + strconv.Itoa(s)
	d := filepath.Join(f.root, "devices/virtual/nvme-subsystem", name)
	writeFile(f.t, filepath.Join(d, "subsysnqn"), nqn+"\n")
	for _, c := range ctrls {
		symlink(f.t, "../../nvme-fabrics/ctl/nvme"+strconv.Itoa(c), filepath.Join(d, "nvme"+strconv.Itoa(c)))
	}
	symlink(f.t, "../../devices/virtual/nvme-subsystem/"+name, filepath.Join(f.root, "class/nvme-subsystem", name))
}

// ns adds a namespace block device under controller device directory
// dir (no multipath).
func (f *fakeSysfs) ns(dir, name string, nsid, sectors, lbs int) {
	block(f.t, filepath.Join(f.ctrlDir(dir), name), nsid, sectors, lbs)
}

// path adds the hidden multipath path nvme<s>c<ctrl>n<head>.
func (f *fakeSysfs) path(s, ctrl, head, nsid, sectors, lbs int) {
	name := "nvme" + strconv.Itoa(s) + "c" + strconv.Itoa(ctrl) + "n" + strconv.Itoa(head)
	block(f.t, filepath.Join(f.ctrlDir("nvme"+strconv.Itoa(ctrl)), name), nsid, sectors, lbs)
}

// head adds the multipath head nvme<s>n<head> under nvme-subsys<s>.
func (f *fakeSysfs) head(s, head, nsid, sectors, lbs int) {
	name := "nvme" + strconv.Itoa(s) + "n" + strconv.Itoa(head)
	block(f.t, filepath.Join(f.root, "devices/virtual/nvme-subsystem", "nvme-subsys"+strconv.Itoa(s), name), nsid, sectors, lbs)
}

// block writes a block device directory; it creates the files in a
// scratch directory and renames it into place, so a concurrent reader
// never sees half of it (the kernel publishes its attributes with the
// directory).
func block(t *testing.T, dir string, nsid, sectors, lbs int) {
	tmp := dir + ".tmp"
	writeFile(t, filepath.Join(tmp, "size"), strconv.Itoa(sectors)+"\n")
	writeFile(t, filepath.Join(tmp, "nsid"), strconv.Itoa(nsid)+"\n")
	writeFile(t, filepath.Join(tmp, "queue", "logical_block_size"), strconv.Itoa(lbs)+"\n")
	if err := os.Rename(tmp, dir); err != nil {
		t.Error(err)
	}
}

// writeFile is safe to call from a goroutine other than the test's.
func writeFile(t *testing.T, p, v string) {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Error(err)
		return
	}
	if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
		t.Error(err)
	}
}

func symlink(t *testing.T, target, link string) {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Error(err)
		return
	}
	if err := os.Symlink(target, link); err != nil && !errors.Is(err, os.ErrExist) {
		t.Error(err)
	}
}
