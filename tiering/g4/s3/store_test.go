package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3"
	"github.com/ctxmem/ctxmemd/tiering/g4/s3/s3test"
	"github.com/ctxmem/ctxmemd/tiering/g4/storetest"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

var bg = context.Background()

// serverOptions returns Options for srv with the given prefix.
func serverOptions(srv *s3test.Server, prefix string) s3.Options {
	return s3.Options{
		Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: prefix, Region: s3test.Region,
		Addressing: s3.AddressPath, Insecure: true, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
	}
}

// newStore opens a store on srv or fails the test.
func newStore(t testing.TB, opts s3.Options) *s3.Store {
	t.Helper()
	s, err := s3.New(bg, opts)
	if err != nil {
		t.Fatalf("s3.New(%v): %v", opts, err)
	}
	return s
}

// posixConflicts are the storetest cases that need an object "a" and an
// object "a/b" at once, which versitygw's posix backend cannot hold (a
// key is a file, its parent segments are directories: the second PUT is
// answered "Object parent already exists as a file"). Real S3 has no such
// limit; TestListPrefixes covers the same prefix rules without the clash.
var posixConflicts = map[string]string{
	"List":                    "versitygw posix cannot hold an object and a longer key below it (a and a/b); see TestListPrefixes",
	"ObjectAndPrefixSameName": "versitygw posix cannot hold an object and a longer key below it (a and a/b)",
}

// TestConformance runs the g4.ObjectStore suite against versitygw, each
// subtest in a store of its own prefix of one bucket.
func TestConformance(t *testing.T) {
	srv := s3test.StartServer(t)
	var n atomic.Int64
	storetest.RunExcept(t, func(t *testing.T) g4.ObjectStore {
		return newStore(t, serverOptions(srv, fmt.Sprintf("conf/%d", n.Add(1))))
	}, posixConflicts)
}

// TestListPrefixes is storetest's List case on names of which none is a
// parent "directory" of another (see posixConflicts): plain string
// prefixes, byte order, sizes, and prefixes ending inside a segment.
func TestListPrefixes(t *testing.T) {
	srv := s3test.StartServer(t)
	s := newStore(t, serverOptions(srv, "lp"))
	all := []string{"a-b", "a/b/c", "a/bc", "a/bd/e", "a/b0", "a0", "b/x/y/z", "ab", "é", "z z", "a/b/c-d", "a.b"}
	for i, n := range all {
		storetest.MustPut(t, s, n, storetest.Data(i, i), nil)
	}
	sorted := slices.Clone(all)
	sort.Strings(sorted)
	for _, prefix := range []string{"", "a", "a/", "a/b", "a/b/", "a/bc", "a/bd/", "a/x", "b/", "b/x/y/", "b/x/y/z",
		"b/x/y/zz", "é", "z", "z z", "nope/", "a-", "a/b/c", "a.", "a//", "/a", "../"} {
		var want []string
		for _, n := range sorted {
			if strings.HasPrefix(n, prefix) {
				want = append(want, n)
			}
		}
		if got := storetest.Names(t, s, prefix); !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q; want %q", prefix, got, want)
		}
	}
	_ = s.List(bg, "", func(a g4.ObjectAttrs) bool {
		if i := slices.Index(all, a.Name); a.Size != int64(i) || a.ModTime.IsZero() || a.Meta != nil {
			t.Errorf("List: %+v; want size %d, a mod time, nil meta", a, i)
		}
		return true
	})
}

// TestKeysAreLiteral checks that names reach the server unchanged under
// "prefix/": awkward characters are neither double-encoded nor
// normalised, so other S3 tools see the same keys.
func TestKeysAreLiteral(t *testing.T) {
	srv := s3test.StartServer(t)
	s := newStore(t, serverOptions(srv, "lit/p q"))
	raw := srv.Client()
	names := []string{"sp ace", "per%cent", "%41", "plus+sign", "a+b c%d/é 日本/😀", "x@y=z&w?v#u", "tilde~"}
	for i, n := range names {
		storetest.MustPut(t, s, n, storetest.Data(i, 10+i), nil)
		info, err := raw.StatObject(bg, srv.Bucket, "lit/p q/"+n, minio.StatObjectOptions{})
		if err != nil || info.Size != int64(10+i) {
			t.Fatalf("raw stat of key %q: %+v, %v", "lit/p q/"+n, info, err)
		}
		// versitygw posix maps a key to the same path under the bucket.
		b, err := os.ReadFile(srv.ObjectPath("lit/p q/" + n))
		if err != nil || !bytes.Equal(b, storetest.Data(i, 10+i)) {
			t.Fatalf("backing file of %q: %d bytes, %v", n, len(b), err)
		}
	}
	// A store without prefix sees the prefixed names under "lit/p q/".
	root := newStore(t, serverOptions(srv, ""))
	got := storetest.Names(t, root, "lit/")
	want := make([]string, len(names))
	for i, n := range names {
		want[i] = "lit/p q/" + n
	}
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("root listing = %q; want %q", got, want)
	}
	// Another prefix is isolated.
	other := newStore(t, serverOptions(srv, "lit/p"))
	if got := storetest.Names(t, other, ""); len(got) != 0 {
		t.Fatalf("store with prefix lit/p lists %q (must not see lit/p q/...)", got)
	}
}

// TestMetadataValues sends values HTTP would mangle (leading or trailing
// spaces) or that look encoded, and checks plain values are stored as
// plain x-amz-meta-* headers.
func TestMetadataValues(t *testing.T) {
	srv := s3test.StartServer(t)
	s := newStore(t, serverOptions(srv, "meta"))
	meta := map[string]string{
		"plain": "0badf00d", "lead": "  two spaces", "trail": "end ", "both": " x ", "empty": "",
		"rfc2047-look": "=?UTF-8?B?eA==?=", "eq": "a=?b", "marker": "~b64~eA==", "content-type": "not/a-header", "x-amz-acl": "private",
	}
	storetest.MustPut(t, s, "o", []byte("x"), meta)
	_, got := storetest.MustGet(t, s, "o")
	if !mapsEqual(got, meta) {
		t.Fatalf("Get meta = %q; want %q", got, meta)
	}
	a, err := s.Head(bg, "o")
	if err != nil || !mapsEqual(a.Meta, meta) {
		t.Fatalf("Head meta = %q, %v", a.Meta, err)
	}
	info, err := srv.Client().StatObject(bg, srv.Bucket, "meta/o", minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.UserMetadata["Plain"] != "0badf00d" || info.UserMetadata["Content-Type"] != "not/a-header" {
		t.Fatalf("raw user metadata = %q", info.UserMetadata)
	}
	if info.ContentType == "not/a-header" {
		t.Fatal("metadata key content-type became the Content-Type header")
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestMultipart64MiB puts a 64 MiB object (four 16 MiB parts), reads it
// back whole and by ranges across part boundaries, and checks that wrong
// reader lengths fail without touching the stored object.
func TestMultipart64MiB(t *testing.T) {
	srv := s3test.StartServer(t)
	s := newStore(t, serverOptions(srv, "mp"))
	const size = 64 << 20
	data := storetest.Data(64, size)
	before := s.RequestStats()
	storetest.MustPut(t, s, "big", data, map[string]string{"crc32c": "1234abcd"})
	d := diff(s.RequestStats(), before)
	// Initiate and complete are POSTs, each part a PUT.
	if d.Put != 4 || d.Post != 2 {
		t.Fatalf("64 MiB put sent %d PUT and %d POST requests; want 4 parts + initiate/complete", d.Put, d.Post)
	}
	t.Logf("64 MiB multipart put: %+v", d)
	got, meta := storetest.MustGet(t, s, "big")
	if !bytes.Equal(got, data) || meta["crc32c"] != "1234abcd" {
		t.Fatalf("Get(big): %d bytes, equal %v, meta %v", len(got), bytes.Equal(got, data), meta)
	}
	for _, r := range []struct{ off, n int64 }{{16<<20 - 5, 10}, {size - 3, -1}, {32 << 20, 16 << 20}, {1, 48 << 20}} {
		rc, err := s.GetRange(bg, "big", r.off, r.n)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		end := int64(size)
		if r.n >= 0 {
			end = r.off + r.n
		}
		if err != nil || !bytes.Equal(b, data[r.off:end]) {
			t.Fatalf("GetRange(%d, %d): %d bytes, %v", r.off, r.n, len(b), err)
		}
	}
	// Reader shorter or longer than size: the multipart upload fails and
	// the old object stays.
	if err := s.Put(bg, "big", bytes.NewReader(data[:40<<20]), size, nil); !errors.Is(err, g4.ErrInvalid) {
		t.Fatalf("Put with a short multipart reader = %v; want ErrInvalid", err)
	}
	if err := s.Put(bg, "big", bytes.NewReader(data), 40<<20, nil); !errors.Is(err, g4.ErrInvalid) {
		t.Fatalf("Put with a long multipart reader = %v; want ErrInvalid", err)
	}
	if a, err := s.Head(bg, "big"); err != nil || a.Size != size || a.Meta["crc32c"] != "1234abcd" {
		t.Fatalf("after failed puts Head = %+v, %v", a, err)
	}
	// Unknown size beyond one part: multipart as well.
	before = s.RequestStats()
	if err := s.Put(bg, "unknown", io.LimitReader(bytes.NewReader(data), 20<<20), -1, nil); err != nil {
		t.Fatal(err)
	}
	if d := diff(s.RequestStats(), before); d.Put != 2 || d.Post != 2 {
		t.Fatalf("20 MiB put of unknown size: %+v; want 2 parts", d)
	}
	if got, _ := storetest.MustGet(t, s, "unknown"); !bytes.Equal(got, data[:20<<20]) {
		t.Fatal("unknown-size multipart object differs")
	}
	// Exactly one part: a single PUT.
	before = s.RequestStats()
	storetest.MustPut(t, s, "onepart", data[:16<<20], nil)
	if d := diff(s.RequestStats(), before); d.Put != 1 || d.Post != 0 {
		t.Fatalf("16 MiB put: %+v; want one PUT", d)
	}
	if n := storetest.Names(t, s, ""); !slices.Equal(n, []string{"big", "onepart", "unknown"}) {
		t.Fatalf("List = %q", n)
	}
}

func diff(a, b s3.RequestStats) s3.RequestStats {
	return s3.RequestStats{
		Get: a.Get - b.Get, Put: a.Put - b.Put, Head: a.Head - b.Head, Delete: a.Delete - b.Delete,
		List: a.List - b.List, Post: a.Post - b.Post, Other: a.Other - b.Other, Failed: a.Failed - b.Failed,
		BytesSent: a.BytesSent - b.BytesSent, BytesReceived: a.BytesReceived - b.BytesReceived,
	}
}

// TestServerRejectsKey: a key the server refuses (here a key below an
// existing object, which versitygw posix cannot store) is a clear error,
// not "unavailable", and leaves the store healthy.
func TestServerRejectsKey(t *testing.T) {
	srv := s3test.StartServer(t)
	s := newStore(t, serverOptions(srv, "rej"))
	storetest.MustPut(t, s, "file", []byte("x"), nil)
	err := s.Put(bg, "file/below", strings.NewReader("y"), 1, nil)
	if err == nil || errors.Is(err, tier.ErrUnavailable) || !strings.Contains(err.Error(), "file/below") {
		t.Fatalf("Put below a file = %v; want a clear non-unavailable error", err)
	}
	t.Logf("server refusal: %v", err)
	if !s.Healthy() {
		t.Fatalf("an answered refusal marked the store unhealthy: %v", s.LastError())
	}
}

func TestBadCredentials(t *testing.T) {
	srv := s3test.StartServer(t)
	for _, c := range []struct {
		name, ak, sk, want string
	}{
		{"wrong secret", srv.AccessKey, "not-the-secret", "check the secret key"},
		{"unknown access key", "NOSUCHKEY", srv.SecretKey, "check the access key"},
	} {
		opts := serverOptions(srv, "")
		opts.AccessKey, opts.SecretKey = c.ak, c.sk
		start := time.Now()
		_, err := s3.New(bg, opts)
		if !errors.Is(err, s3.ErrAccessDenied) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), srv.Endpoint) {
			t.Fatalf("%s: New = %v; want ErrAccessDenied saying %q and naming the endpoint", c.name, err, c.want)
		}
		t.Logf("%s (%v): %v", c.name, time.Since(start).Round(time.Millisecond), err)
	}
}

// TestCredentialSources: environment, shared credentials file, none.
func TestCredentialSources(t *testing.T) {
	srv := s3test.StartServer(t)
	dir := t.TempDir()
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none-config"))
	opts := serverOptions(srv, "creds")
	opts.AccessKey, opts.SecretKey = "", ""

	// None: anonymous, refused with a message saying no credentials were found.
	_, err := s3.New(bg, opts)
	if !errors.Is(err, s3.ErrAccessDenied) || !strings.Contains(err.Error(), "no credentials") {
		t.Fatalf("New without credentials = %v", err)
	}
	t.Logf("no credentials: %v", err)

	// Shared credentials file with a named profile.
	file := filepath.Join(dir, "credentials")
	body := fmt.Sprintf("[default]\naws_access_key_id = WRONG\naws_secret_access_key = WRONG\n\n[ctx]\naws_access_key_id = %s\naws_secret_access_key = %s\n", srv.AccessKey, srv.SecretKey)
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	fo := opts
	fo.CredentialsFile, fo.Profile = file, "ctx"
	s := newStore(t, fo)
	storetest.MustPut(t, s, "from-file", []byte("f"), nil)
	fo.Profile = "default"
	if _, err := s3.New(bg, fo); !errors.Is(err, s3.ErrAccessDenied) || !strings.Contains(err.Error(), file) {
		t.Fatalf("wrong keys from the file: %v; want ErrAccessDenied naming the file", err)
	}

	// Environment variables win over the file.
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	s = newStore(t, fo) // the file's default profile is wrong: env must be used
	if got, _ := storetest.MustGet(t, s, "from-file"); string(got) != "f" {
		t.Fatalf("got %q", got)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	if _, err := s3.New(bg, opts); !errors.Is(err, s3.ErrAccessDenied) || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Fatalf("wrong env secret: %v; want ErrAccessDenied naming the environment", err)
	}
}

func TestMissingBucket(t *testing.T) {
	srv := s3test.StartServer(t)
	opts := serverOptions(srv, "p")
	opts.Bucket = "no-such-bucket"
	_, err := s3.New(bg, opts)
	want := fmt.Sprintf(`bucket "no-such-bucket" does not exist at endpoint http://%s`, srv.Endpoint)
	if !errors.Is(err, s3.ErrBucketNotFound) || !strings.Contains(err.Error(), want) {
		t.Fatalf("New = %v; want ErrBucketNotFound saying %q", err, want)
	}
	t.Logf("missing bucket: %v", err)
	opts.CreateBucket = true
	s := newStore(t, opts)
	storetest.MustPut(t, s, "x", []byte("x"), nil)
	if _, err := os.Stat(filepath.Join(srv.Dir, "no-such-bucket", "p", "x")); err != nil {
		t.Fatalf("object not in the created bucket: %v", err)
	}
	// The bucket vanishing later: calls fail as unavailable, naming it.
	if err := os.RemoveAll(filepath.Join(srv.Dir, "no-such-bucket")); err != nil {
		t.Fatal(err)
	}
	err = s.Put(bg, "y", strings.NewReader("y"), 1, nil)
	t.Logf("bucket gone: %v", err)
	if !errors.Is(err, s3.ErrBucketNotFound) || !errors.Is(err, tier.ErrUnavailable) || s.Healthy() {
		t.Fatalf("Put after the bucket vanished = %v (healthy %v); want ErrBucketNotFound + ErrUnavailable", err, s.Healthy())
	}
}

func TestUnreachableAtStart(t *testing.T) {
	srv := s3test.StartServer(t)
	opts := serverOptions(srv, "")
	srv.Stop()
	opts.Timeout = 500 * time.Millisecond
	start := time.Now()
	_, err := s3.New(bg, opts)
	if !errors.Is(err, tier.ErrUnavailable) || !strings.Contains(err.Error(), srv.Endpoint) {
		t.Fatalf("New against a stopped server = %v; want ErrUnavailable naming the endpoint", err)
	}
	t.Logf("unreachable at start (%v): %v", time.Since(start).Round(time.Millisecond), err)
	// HTTPS against a plain-HTTP server says so.
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	opts.Insecure = false
	_, err = s3.New(bg, opts)
	if err == nil || !strings.Contains(err.Error(), "insecure=true") {
		t.Fatalf("HTTPS to an HTTP server: %v; want a hint about insecure=true", err)
	}
	t.Logf("https to http: %v", err)
}

// TestLifecycleNotSupported: versitygw's posix backend has no bucket
// lifecycle; the error says so.
func TestLifecycleNotSupported(t *testing.T) {
	srv := s3test.StartServer(t)
	s := newStore(t, serverOptions(srv, "lc"))
	err := s.SetLifecycleTTL(bg, 3)
	if !errors.Is(err, s3.ErrNotSupported) || !strings.Contains(err.Error(), "not supported by this server") {
		t.Fatalf("SetLifecycleTTL = %v; want ErrNotSupported", err)
	}
	if errors.Is(err, tier.ErrUnavailable) || !s.Healthy() {
		t.Fatalf("not-supported counted as unavailable: %v", err)
	}
	t.Logf("lifecycle: %v", err)
}

// TestTLSWithCA: HTTPS to a server whose certificate is signed by a
// private CA works with ca=FILE, and without it fails saying to give one.
func TestTLSWithCA(t *testing.T) {
	srv := s3test.StartTLSServer(t)
	opts := serverOptions(srv, "tls")
	opts.Insecure = false
	opts.CAFile = srv.CAFile
	s := newStore(t, opts)
	storetest.MustPut(t, s, "over tls", storetest.Data(3, 300_000), map[string]string{"k": "v"})
	if got, meta := storetest.MustGet(t, s, "over tls"); !bytes.Equal(got, storetest.Data(3, 300_000)) || meta["k"] != "v" {
		t.Fatal("TLS round trip differs")
	}
	u, err := s3.ParseURL("s3://" + srv.Bucket + "/tls?endpoint=https://" + srv.Endpoint + "&path_style=true&region=us-east-1&ca=" + srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	u.AccessKey, u.SecretKey = srv.AccessKey, srv.SecretKey
	if got := storetest.Names(t, newStore(t, u), ""); !slices.Equal(got, []string{"over tls"}) {
		t.Fatalf("store from URL lists %q", got)
	}
	opts.CAFile = ""
	start := time.Now()
	_, err = s3.New(bg, opts)
	if err == nil || !strings.Contains(err.Error(), "ca=") {
		t.Fatalf("New without the CA = %v; want a hint to give ca=", err)
	}
	t.Logf("untrusted certificate (%v): %v", time.Since(start).Round(time.Millisecond), err)
	opts.Insecure = true
	opts.Timeout = 500 * time.Millisecond
	if _, err := s3.New(bg, opts); err == nil {
		t.Fatal("plain HTTP to an HTTPS server succeeded")
	}
}

// TestAllowUnreachable: with AllowUnreachable, New against a stopped or
// hung server returns the store, unhealthy, with the outage as LastError,
// and the store works once the server answers; a missing bucket, refused
// credentials and an HTTPS/HTTP mismatch (answers, not silence) still fail
// New.
func TestAllowUnreachable(t *testing.T) {
	srv := s3test.StartServer(t)
	opts := serverOptions(srv, "p")
	opts.Timeout = 300 * time.Millisecond
	opts.AllowUnreachable = true
	srv.Stop()
	start := time.Now()
	s, err := s3.New(bg, opts)
	if err != nil {
		t.Fatalf("New against a stopped server with AllowUnreachable = %v; want the store", err)
	}
	if s.Healthy() || !errors.Is(s.LastError(), tier.ErrUnavailable) {
		t.Fatalf("store opened during the outage: healthy %v, last error %v", s.Healthy(), s.LastError())
	}
	t.Logf("opened unhealthy in %v: %v", time.Since(start).Round(time.Millisecond), s.LastError())
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	storetest.MustPut(t, s, "x", []byte("x"), nil)
	if !s.Healthy() {
		t.Fatal("still unhealthy after a call was answered")
	}

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := s3.New(bg, opts); err != nil {
		t.Fatalf("New against a hung server with AllowUnreachable = %v; want the store", err)
	}
	t.Logf("hung server: New returned in %v", time.Since(start).Round(time.Millisecond))
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}

	bad := opts
	bad.Bucket = "no-such-bucket"
	if _, err := s3.New(bg, bad); !errors.Is(err, s3.ErrBucketNotFound) {
		t.Fatalf("missing bucket with AllowUnreachable: %v; want ErrBucketNotFound", err)
	}
	bad = opts
	bad.SecretKey = "not-the-secret"
	if _, err := s3.New(bg, bad); !errors.Is(err, s3.ErrAccessDenied) {
		t.Fatalf("wrong secret with AllowUnreachable: %v; want ErrAccessDenied", err)
	}
	bad = opts
	bad.Insecure = false
	if _, err := s3.New(bg, bad); err == nil || !strings.Contains(err.Error(), "insecure=true") {
		t.Fatalf("HTTPS to an HTTP server with AllowUnreachable: %v; want the error with its hint", err)
	}
}
