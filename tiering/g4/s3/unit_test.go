package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/ctxmem/ctxmemd/tiering/g4"
	"github.com/ctxmem/ctxmemd/tiering/tier"
)

func TestMetaEncoding(t *testing.T) {
	in := map[string]string{
		"a": "plain value", "b": " lead", "c": "trail ", "d": "", "e": "=?UTF-8?B?eA==?=", "f": "~b64~x", "g": "a=?b", "h": "~",
	}
	enc := encodeMeta(in)
	for k, v := range in {
		got := enc[metaHeaderPrefix+k]
		raw := !strings.HasPrefix(v, " ") && !strings.HasSuffix(v, " ") && !strings.Contains(v, "=?") && !strings.HasPrefix(v, encodedMarker)
		if raw != (got == v) || strings.Contains(got, "=?") || strings.HasPrefix(got, " ") || strings.HasSuffix(got, " ") {
			t.Errorf("encode %q: %q -> %q", k, v, got)
		}
	}
	// minio-go hands back canonical header case without the prefix.
	back := map[string]string{}
	for k, v := range enc {
		name := strings.TrimPrefix(k, metaHeaderPrefix)
		back[strings.ToUpper(name[:1])+name[1:]] = v
	}
	out := decodeMeta(back)
	if fmt.Sprint(out) != fmt.Sprint(in) {
		t.Fatalf("round trip:\n%q\n%q", out, in)
	}
	if encodeMeta(nil) != nil {
		t.Fatal("nil meta encodes to a non-nil map")
	}
}

func TestExactReader(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000)
	for _, c := range []struct {
		n, size int64
		ok      bool
	}{{10000, 10000, true}, {9999, 10000, false}, {10000, 9999, false}, {0, 0, true}, {1, 0, false}} {
		for _, wrap := range []func(io.Reader) io.Reader{
			func(r io.Reader) io.Reader { return r },
			iotest.OneByteReader,
			iotest.HalfReader,
			iotest.DataErrReader,
		} {
			r := &exactReader{r: wrap(bytes.NewReader(data[:c.n])), left: c.size}
			got, err := io.ReadAll(r)
			if c.ok && (err != nil || !bytes.Equal(got, data[:c.n])) {
				t.Fatalf("n=%d size=%d: %d bytes, %v", c.n, c.size, len(got), err)
			}
			if !c.ok && !errors.Is(err, errSizeMismatch) {
				t.Fatalf("n=%d size=%d: err %v; want errSizeMismatch", c.n, c.size, err)
			}
			if !c.ok && c.size > 0 && int64(len(got)) >= c.size {
				t.Fatalf("n=%d size=%d: handed out all %d bytes before failing", c.n, c.size, len(got))
			}
		}
	}
}

func TestPrefixCanMatch(t *testing.T) {
	for p, want := range map[string]bool{
		"": true, "a": true, "a/": true, "a/b": true, ".": true, "..": true, "a/.": true, "a/..x/": true, "...": true,
		"/": false, "/a": false, "a//": false, "./": false, "../": false, "a/./b": false, "a/../": false, "x\x00": false,
	} {
		if got := prefixCanMatch(p); got != want {
			t.Errorf("prefixCanMatch(%q) = %v; want %v", p, got, want)
		}
	}
}

// fakeS3 is a unit-test HTTP server that answers the few S3 requests a
// test sends; it is not a substitute for the real server (s3test).
type fakeS3 struct {
	mu        sync.Mutex
	requests  []string // "METHOD path?query"
	lifecycle string   // stored lifecycle XML; "" = none
	status    int      // if set, every request gets this status with code
	code      string
	// tags: object key → its PUT's X-Amz-Tagging header ("" untagged),
	// while the object exists; rejectTags answers a tagged PUT with
	// tagStatus and tagCode (default NotImplemented).
	tags       map[string]string
	rejectTags bool
	tagStatus  int
	tagCode    string
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/xml")
	errXML := func(status int, code string) {
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, code)
	}
	q := r.URL.Query()
	switch {
	case f.status != 0:
		errXML(f.status, f.code)
	case q.Has("list-type"):
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name><IsTruncated>false</IsTruncated></ListBucketResult>`)
	case q.Has("lifecycle") && r.Method == http.MethodGet:
		if f.lifecycle == "" {
			errXML(http.StatusNotFound, codeNoSuchLifecycle)
			return
		}
		fmt.Fprint(w, f.lifecycle)
	case q.Has("lifecycle") && r.Method == http.MethodPut:
		f.lifecycle = string(body)
	case q.Has("lifecycle") && r.Method == http.MethodDelete:
		f.lifecycle = ""
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPut && len(q) == 0:
		tag := r.Header.Get("X-Amz-Tagging")
		if tag != "" && f.rejectTags {
			if f.tagStatus != 0 {
				errXML(f.tagStatus, f.tagCode)
			} else {
				errXML(http.StatusNotImplemented, codeNotImplemented)
			}
			return
		}
		if f.tags == nil {
			f.tags = map[string]string{}
		}
		f.tags[r.URL.Path] = tag
		w.Header().Set("ETag", `"d41d8cd98f00b204e9800998ecf8427e"`)
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodDelete && len(q) == 0:
		delete(f.tags, r.URL.Path)
		w.WriteHeader(http.StatusNoContent)
	default:
		errXML(http.StatusNotImplemented, codeNotImplemented)
	}
}

func (f *fakeS3) store(t *testing.T, retries int) (*Store, error) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return New(context.Background(), Options{
		Endpoint: srv.URL, Bucket: "bkt", Prefix: "pre", Region: "us-east-1", Addressing: AddressPath,
		AccessKey: "ak", SecretKey: "sk", Retries: retries,
	})
}

func TestLifecycleRule(t *testing.T) {
	f := &fakeS3{lifecycle: `<LifecycleConfiguration><Rule><ID>other</ID><Status>Enabled</Status><Filter><Prefix>logs/</Prefix></Filter><Expiration><Days>30</Days></Expiration></Rule></LifecycleConfiguration>`}
	s, err := f.store(t, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(name string, expirable bool) string {
		t.Helper()
		var err error
		if expirable {
			err = s.PutExpirable(ctx, name, strings.NewReader("x"), 1, nil)
		} else {
			err = s.Put(ctx, name, strings.NewReader("x"), 1, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.tags["/bkt/pre/"+name]
	}
	if tag := put("a", true); tag != "" {
		t.Fatalf("tagged %q before any rule was installed", tag)
	}
	if err := s.SetLifecycleTTL(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<ID>other</ID>", "<Prefix>logs/</Prefix>", "<Days>30</Days>",
		"<ID>" + LifecycleRuleID + "</ID>", "<And><Prefix>pre/</Prefix><Tag><Key>" + ExpiryTag + "</Key><Value>" + ExpiryTagValue + "</Value></Tag></And>", "<Days>3</Days>",
		"<ID>" + uploadsRuleID + "</ID>", "<Filter><Prefix>pre/</Prefix></Filter>", "<DaysAfterInitiation>1</DaysAfterInitiation>"} {
		if !strings.Contains(f.lifecycle, want) {
			t.Fatalf("lifecycle sent lacks %s:\n%s", want, f.lifecycle)
		}
	}
	if _, left := f.tags["/bkt/pre/"+lifecycleProbe]; left {
		t.Fatal("the tagging probe was not deleted")
	}
	// Blocks expiry may drop are tagged for the rule, kept ones are not.
	if tag := put("b", true); tag != ExpiryTag+"="+ExpiryTagValue {
		t.Fatalf("expirable put tagged %q", tag)
	}
	if tag := put("c", false); tag != "" {
		t.Fatalf("kept put tagged %q", tag)
	}
	// Setting again replaces our rules, keeps the other.
	if err := s.SetLifecycleTTL(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if strings.Count(f.lifecycle, "<ID>"+LifecycleRuleID+"</ID>") != 1 || strings.Count(f.lifecycle, uploadsRuleID) != 1 ||
		!strings.Contains(f.lifecycle, "<Days>5</Days>") || !strings.Contains(f.lifecycle, "<ID>other</ID>") {
		t.Fatalf("after a second set:\n%s", f.lifecycle)
	}
	// Removing ours keeps the other and stops the tagging; removing from a
	// bucket with only ours deletes the configuration.
	if err := s.SetLifecycleTTL(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(f.lifecycle, LifecycleRuleID) || !strings.Contains(f.lifecycle, "<ID>other</ID>") {
		t.Fatalf("after removal:\n%s", f.lifecycle)
	}
	if tag := put("d", true); tag != "" {
		t.Fatalf("tagged %q after the rule was removed", tag)
	}
	f.lifecycle = ""
	if err := s.SetLifecycleTTL(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLifecycleTTL(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if f.lifecycle != "" || !strings.HasPrefix(f.requests[len(f.requests)-1], "DELETE ") {
		t.Fatalf("lifecycle not deleted: %q, last request %s", f.lifecycle, f.requests[len(f.requests)-1])
	}
}

// TestLifecycleTaggingRefused: a server with lifecycle rules that refuses
// tagged PUTs (not implemented, or any other answer than access denied)
// gets no rule (it would expire nothing) and no tags; the daemon does not
// retry it.
func TestLifecycleTaggingRefused(t *testing.T) {
	for _, f := range []*fakeS3{{rejectTags: true}, {rejectTags: true, tagStatus: http.StatusBadRequest, tagCode: "InvalidTag"}} {
		s, err := f.store(t, 0)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := s.SetLifecycleTTL(ctx, 3); !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "tagged PUT") {
			t.Fatalf("code %q: SetLifecycleTTL = %v; want ErrNotSupported for the tagged PUT", f.tagCode, err)
		}
		if f.lifecycle != "" {
			t.Fatalf("code %q: rule left installed:\n%s", f.tagCode, f.lifecycle)
		}
		if s.ExpiresOnServer() {
			t.Fatalf("code %q: tagging on after the refusal", f.tagCode)
		}
		if err := s.PutExpirable(ctx, "a", strings.NewReader("x"), 1, nil); err != nil {
			t.Fatalf("code %q: expirable put after the refusal: %v", f.tagCode, err)
		}
		if tag := f.tags["/bkt/pre/a"]; tag != "" {
			t.Fatalf("code %q: tagged %q", f.tagCode, tag)
		}
	}
}

func TestLifecycleDays(t *testing.T) {
	for ttl, want := range map[time.Duration]int{time.Hour: 1, 24 * time.Hour: 1, 25 * time.Hour: 2, 72 * time.Hour: 3, 0: 1} {
		if got := LifecycleDays(ttl); got != want {
			t.Errorf("LifecycleDays(%v) = %d; want %d", ttl, got, want)
		}
	}
}

// TestServerErrorsBounded: a server answering 503 to everything is
// unavailable, and New sends exactly Retries+1 attempts.
func TestServerErrorsBounded(t *testing.T) {
	for _, retries := range []int{-1, 1, 2} {
		f := &fakeS3{status: http.StatusServiceUnavailable, code: "SlowDown"}
		_, err := f.store(t, retries)
		if !errors.Is(err, tier.ErrUnavailable) || !strings.Contains(err.Error(), "503") {
			t.Fatalf("retries %d: New = %v; want ErrUnavailable naming 503", retries, err)
		}
		want := max(retries, 0) + 1
		if len(f.requests) != want {
			t.Fatalf("retries %d: %d requests sent; want %d", retries, len(f.requests), want)
		}
	}
	// 500 after New: unavailable, store degraded, recovers on an answer.
	f := &fakeS3{}
	s, err := f.store(t, -1)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.status, f.code = http.StatusInternalServerError, "InternalError"
	f.mu.Unlock()
	if _, err := s.Head(context.Background(), "x"); !errors.Is(err, tier.ErrUnavailable) || s.Healthy() {
		t.Fatalf("Head on 500 = %v, healthy %v", err, s.Healthy())
	}
	f.mu.Lock()
	f.status = 0
	f.mu.Unlock()
	if err := s.Ping(context.Background()); err != nil || !s.Healthy() {
		t.Fatalf("Ping after recovery = %v, healthy %v", err, s.Healthy())
	}
	// 400: the server rejected the request; not an outage.
	f.mu.Lock()
	f.status, f.code = http.StatusBadRequest, "InvalidArgument"
	f.mu.Unlock()
	if _, err := s.Head(context.Background(), "x"); !errors.Is(err, g4.ErrInvalid) || errors.Is(err, tier.ErrUnavailable) || !s.Healthy() {
		t.Fatalf("Head on 400 = %v, healthy %v", err, s.Healthy())
	}
}
