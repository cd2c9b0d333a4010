package s3

import (
	"context"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/ctxmem/ctxmemd/tiering/g4/s3/s3test"
)

// TestTaggedPutOnARealServer: the tag PutExpirable sets once a lifecycle
// rule is in place is accepted and stored by a real S3 server (versitygw
// has tagging but no lifecycle, so the rule's own path is the unit
// tests'; here the tagging is switched on by hand).
func TestTaggedPutOnARealServer(t *testing.T) {
	srv := s3test.StartServer(t)
	ctx := context.Background()
	s, err := New(ctx, Options{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "tag", Region: s3test.Region,
		Addressing: AddressPath, Insecure: true, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.probeTagging(ctx); err != nil {
		t.Fatalf("tagging probe: %v", err)
	}
	s.tagExpirable.Store(true)
	if err := s.PutExpirable(ctx, "cache", strings.NewReader("kv"), 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "kept", strings.NewReader("kv"), 2, nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"cache": ExpiryTagValue, "kept": ""} {
		tags, err := s.client.GetObjectTagging(ctx, srv.Bucket, "tag/"+name, minio.GetObjectTaggingOptions{})
		if err != nil {
			t.Fatalf("tags of %s: %v", name, err)
		}
		if got := tags.ToMap()[ExpiryTag]; got != want {
			t.Fatalf("%s: tag %s = %q; want %q (tags %v)", name, ExpiryTag, got, want, tags.ToMap())
		}
	}
}
