package s3

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/ctxmem/ctxmemd/tiering/g4/s3/s3test"
	"github.com/minio/minio-go/v7"
)

func TestScratch(t *testing.T) {
	srv := s3test.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	put := func(k string, data string, meta map[string]string) {
		_, err := c.PutObject(ctx, srv.Bucket, k, bytes.NewReader([]byte(data)), int64(len(data)), minio.PutObjectOptions{UserMetadata: meta})
		fmt.Printf("PUT %q: %v\n", k, err)
	}
	put("a", "x", nil)
	put("a/b", "y", nil)
	put("c/d", "y", nil)
	put("c", "y", nil)
	put("present/x", "x", nil)
	_, err := c.StatObject(ctx, srv.Bucket, "present/x/z", minio.StatObjectOptions{})
	fmt.Printf("stat present/x/z: %v %+v\n", err, minio.ToErrorResponse(err))
	_, _, _, err = minio.Core{Client: c}.GetObject(ctx, srv.Bucket, "present/x/z", minio.GetObjectOptions{})
	fmt.Printf("get present/x/z: %v %+v\n", err, minio.ToErrorResponse(err))
	for _, k := range []string{".hidden", "..dots", "...", "tab\there", "q'uote\"s", "back\\slash", "a=b&c?d#e", "%", "unicode/é/日本語/emoji😀", "x-a", "x/b", "x0", "x/bc", "x/b/c"} {
		put(k, "v", nil)
	}
	put("m", "v", map[string]string{"x-amz-meta-empty": "", "x-amz-meta-sp": "  lead and trail  ", "x-amz-meta-Crc": "A b"})
	info, err := c.StatObject(ctx, srv.Bucket, "m", minio.StatObjectOptions{})
	fmt.Printf("meta: %q %v\n", info.UserMetadata, err)
	for o := range c.ListObjectsIter(ctx, srv.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		fmt.Printf("  list %q %d %v\n", o.Key, o.Size, o.Err)
	}
	for o := range c.ListObjectsIter(ctx, srv.Bucket, minio.ListObjectsOptions{Recursive: true, Prefix: "x/b"}) {
		fmt.Printf("  list x/b %q %d %v\n", o.Key, o.Size, o.Err)
	}
	put("e", "", nil)
	opts := minio.GetObjectOptions{}
	opts.SetRange(0, 0)
	_, _, _, err = minio.Core{Client: c}.GetObject(ctx, srv.Bucket, "e", opts)
	fmt.Printf("range empty: %v %+v\n", err, minio.ToErrorResponse(err))
	put("r", "0123456789", nil)
	opts = minio.GetObjectOptions{}
	opts.SetRange(10, 0)
	rc, _, h, err := minio.Core{Client: c}.GetObject(ctx, srv.Bucket, "r", opts)
	fmt.Printf("range 10-: %v %+v %v\n", err, minio.ToErrorResponse(err), h)
	if rc != nil {
		b, _ := io.ReadAll(rc)
		fmt.Printf(" got %q\n", b)
	}
	opts = minio.GetObjectOptions{}
	opts.SetRange(5, 100)
	rc, _, h, err = minio.Core{Client: c}.GetObject(ctx, srv.Bucket, "r", opts)
	fmt.Printf("range 5-100: %v %v\n", err, h.Get("Content-Range"))
	if rc != nil {
		b, _ := io.ReadAll(rc)
		fmt.Printf(" got %q\n", b)
	}
	_, err = c.GetBucketLifecycle(ctx, srv.Bucket)
	fmt.Printf("lifecycle get: %v %+v\n", err, minio.ToErrorResponse(err))
	err = c.RemoveObject(ctx, srv.Bucket, "nonexist/zz", minio.RemoveObjectOptions{})
	fmt.Printf("remove missing: %v\n", err)
	err = c.RemoveObject(ctx, srv.Bucket, "present/x/z", minio.RemoveObjectOptions{})
	fmt.Printf("remove under file: %v\n", err)
}
