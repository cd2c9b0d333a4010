package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/minio/minio-go/v7/pkg/lifecycle"

	"github.com/ctxmem/ctxmemd/tiering/tier"
)

// LifecycleRuleID is the ID of the bucket lifecycle rule SetLifecycleTTL
// manages; other rules of the bucket are left as they are.
const LifecycleRuleID = "ctxmem-g4-expiry"

// uploadsRuleID is the second rule SetLifecycleTTL manages: it aborts
// multipart uploads under the prefix (S3 allows no abort in a rule with a
// tag filter).
const uploadsRuleID = LifecycleRuleID + "-uploads"

// ExpiryTag and ExpiryTagValue are the object tag PutExpirable sets while
// the lifecycle rule is installed; the rule expires only objects under the
// store's prefix that carry it, so blocks the daemon must keep (NBD
// exports', written with Put) are never expired by the server.
const (
	ExpiryTag      = "ctxmem-expiry"
	ExpiryTagValue = "ttl"
)

// lifecycleProbe is the object SetLifecycleTTL writes, tagged, and deletes
// to learn whether the server takes tagged PUTs. It is not a block name
// (g4.ParseBlockName), so a listing ignores it should it stay behind.
const lifecycleProbe = "lifecycle-probe"

// LifecycleDays is the rule's expiry in whole days for a G4 TTL: S3
// lifecycle counts whole days (and the server expires some time after),
// so a TTL is rounded up, and is at least one day.
func LifecycleDays(ttl time.Duration) int {
	const day = 24 * time.Hour
	return max(1, int((ttl+day-1)/day))
}

// SetLifecycleTTL installs (days > 0) or removes (days == 0) the bucket
// lifecycle rule LifecycleRuleID: the server deletes objects under the
// store's prefix tagged ExpiryTag=ExpiryTagValue days after they were
// stored; and its companion rule, which aborts multipart uploads under
// the prefix left incomplete for a day. It is a backstop to the G4 tier's
// own TTL sweeper, which keeps running (S3 lifecycle granularity is whole
// days and expiry runs asynchronously); it deletes what a host that is
// gone for good left behind. Other rules of the bucket are kept.
//
// Once the rule is in place, one small tagged object is written and
// deleted: only if the server takes it does PutExpirable tag from then
// on. Removing the rule stops the tagging first. Errors: ErrNotSupported
// when the server implements no bucket lifecycle (as versitygw's posix
// backend) or refuses the tagged PUT for any other reason than access
// (the rule is then removed again), ErrAccessDenied and
// tier.ErrUnavailable as for the store's calls, an error for days < 0.
func (s *Store) SetLifecycleTTL(ctx context.Context, days int) error {
	if days < 0 {
		return fmt.Errorf("s3 lifecycle: negative TTL of %d days", days)
	}
	if days == 0 {
		s.tagExpirable.Store(false)
		return s.setRule(ctx, 0)
	}
	if err := s.setRule(ctx, days); err != nil {
		return err
	}
	if err := s.probeTagging(ctx); err != nil {
		if errors.Is(err, tier.ErrUnavailable) || ctx.Err() != nil {
			return err // the server did not answer: the caller tries again
		}
		// The server answered and refused the tagged PUT: a rule that
		// expires tagged objects would expire nothing of ours.
		if !errors.Is(err, ErrNotSupported) && !errors.Is(err, ErrAccessDenied) {
			err = fmt.Errorf("%w: %w", ErrNotSupported, err)
		}
		if rerr := s.setRule(ctx, 0); rerr != nil {
			return fmt.Errorf("%w (and removing the rule again: %v)", err, rerr)
		}
		return err
	}
	s.tagExpirable.Store(true)
	return nil
}

// setRule writes the bucket's lifecycle with LifecycleRuleID for days (0:
// without it).
func (s *Store) setRule(ctx context.Context, days int) error {
	cfg, err := s.client.GetBucketLifecycle(ctx, s.opts.Bucket)
	if er, ok := s3Error(err); ok && er.Code == codeNoSuchLifecycle {
		cfg, err = lifecycle.NewConfiguration(), nil
	}
	if err != nil {
		return s.lifecycleErr(ctx, err)
	}
	if cfg == nil {
		cfg = lifecycle.NewConfiguration()
	}
	rules := cfg.Rules[:0]
	for _, r := range cfg.Rules {
		if r.ID != LifecycleRuleID && r.ID != uploadsRuleID {
			rules = append(rules, r)
		}
	}
	if days > 0 {
		rules = append(rules, lifecycle.Rule{
			ID:     LifecycleRuleID,
			Status: "Enabled",
			RuleFilter: lifecycle.Filter{And: lifecycle.And{Prefix: s.prefix,
				Tags: []lifecycle.Tag{{Key: ExpiryTag, Value: ExpiryTagValue}}}},
			Expiration: lifecycle.Expiration{Days: lifecycle.ExpirationDays(days)},
		})
		rules = append(rules, lifecycle.Rule{
			ID:         uploadsRuleID,
			Status:     "Enabled",
			RuleFilter: lifecycle.Filter{Prefix: s.prefix},
			AbortIncompleteMultipartUpload: lifecycle.AbortIncompleteMultipartUpload{
				DaysAfterInitiation: 1,
			},
		})
	}
	cfg.Rules = rules // none left: minio-go deletes the configuration
	return s.lifecycleErr(ctx, s.client.SetBucketLifecycle(ctx, s.opts.Bucket, cfg))
}

// probeTagging writes lifecycleProbe tagged and deletes it.
func (s *Store) probeTagging(ctx context.Context) error {
	if err := s.put(ctx, lifecycleProbe, bytes.NewReader([]byte("ctxmem")), 6, nil, true); err != nil {
		return fmt.Errorf("s3 lifecycle: a tagged PUT: %w", err)
	}
	return s.Delete(ctx, lifecycleProbe)
}

func (s *Store) lifecycleErr(ctx context.Context, err error) error {
	err = s.classify(ctx, "lifecycle of bucket "+s.opts.Bucket, "", err)
	if errors.Is(err, ErrNotSupported) {
		return fmt.Errorf("%w; the G4 TTL sweeper still expires blocks", err)
	}
	return err
}
