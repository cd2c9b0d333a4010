package poolkv

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// LeasesBucket is the name of cluster's extent-lease bucket,
// "ctxmem_<cluster>_pool_leases" (next to the buckets of sidecar/msg.Names).
func LeasesBucket(cluster string) string { return "ctxmem_" + cluster + "_pool_leases" }

// IndexBucket is the name of cluster's pool index bucket,
// "ctxmem_<cluster>_pool_index".
func IndexBucket(cluster string) string { return "ctxmem_" + cluster + "_pool_index" }

// EnsureBuckets creates the leases and index buckets of cluster, or updates
// them to history 1, file storage and replicas (0 means 1), and returns
// their handles. It is idempotent and safe to run from every host at once.
// cluster must be 1-64 letters, digits, '_' or '-' (as sidecar/msg
// ValidToken). Errors: a bad cluster name, JetStream not enabled on the
// server, no permission, ctx.
func EnsureBuckets(ctx context.Context, js jetstream.JetStream, cluster string, replicas int) (leases, index jetstream.KeyValue, err error) {
	if err := validToken(cluster); err != nil {
		return nil, nil, fmt.Errorf("poolkv: cluster name: %w", err)
	}
	if replicas <= 0 {
		replicas = 1
	}
	mk := func(name, desc string) (jetstream.KeyValue, error) {
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: name, Description: desc, History: 1,
			Storage: jetstream.FileStorage, Replicas: replicas,
		})
		if err != nil {
			return nil, fmt.Errorf("poolkv: bucket %s: %w", name, err)
		}
		return kv, nil
	}
	if leases, err = mk(LeasesBucket(cluster), "ctxmemd G3.5 pool extent leases"); err != nil {
		return nil, nil, err
	}
	if index, err = mk(IndexBucket(cluster), "ctxmemd G3.5 pool file index"); err != nil {
		return nil, nil, err
	}
	return leases, index, nil
}

// validToken mirrors sidecar/msg.ValidToken without importing the sidecar
// (fabric sits below it).
func validToken(s string) error {
	if len(s) == 0 || len(s) > 64 {
		return fmt.Errorf("%q: want 1-64 letters, digits, '_' or '-'", s)
	}
	for _, c := range []byte(s) {
		ok := c == '_' || c == '-' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if !ok {
			return fmt.Errorf("%q: want 1-64 letters, digits, '_' or '-'", s)
		}
	}
	return nil
}

// isConflict reports whether err is a compare-and-set failure of a KV
// write: the key exists (Create) or its latest revision is not the one
// expected (Update, Delete with LastRevision). Replicated streams report
// code 10164 instead of 10071.
func isConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
