package s3

import (
	"context"
	"errors"
	"fmt"

	"github.com/minio/minio-go/v7/pkg/lifecycle"
)

// LifecycleRuleID is the ID of the bucket lifecycle rule SetLifecycleTTL
// manages; other rules of the bucket are left as they are.
const LifecycleRuleID = "ctxmem-g4-expiry"

// SetLifecycleTTL installs (days > 0) or removes (days == 0) a bucket
// lifecycle rule that makes the server delete objects under the store's
// prefix days after they were stored, and abort multipart uploads left
// incomplete for a day. It is an optional backstop to the G4 tier's own
// TTL sweeper (S3 lifecycle granularity is whole days and expiry runs
// asynchronously). Other rules of the bucket are kept. Errors:
// ErrNotSupported when the server does not implement bucket lifecycle (as
// versitygw's posix backend), ErrAccessDenied and tier.ErrUnavailable as
// for the store's calls, an error for days < 0.
//
// The daemon does not install it: the rule covers every object under the
// prefix, the blocks of NBD exports too, which the sweeper never expires
// (tier.Retainer); a rule that spares them needs the other objects tagged
// at upload and a tag filter.
func (s *Store) SetLifecycleTTL(ctx context.Context, days int) error {
	if days < 0 {
		return fmt.Errorf("s3 lifecycle: negative TTL of %d days", days)
	}
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
		if r.ID != LifecycleRuleID {
			rules = append(rules, r)
		}
	}
	if days > 0 {
		rules = append(rules, lifecycle.Rule{
			ID:         LifecycleRuleID,
			Status:     "Enabled",
			RuleFilter: lifecycle.Filter{Prefix: s.prefix},
			Expiration: lifecycle.Expiration{Days: lifecycle.ExpirationDays(days)},
			AbortIncompleteMultipartUpload: lifecycle.AbortIncompleteMultipartUpload{
				DaysAfterInitiation: 1,
			},
		})
	}
	cfg.Rules = rules
	return s.lifecycleErr(ctx, s.client.SetBucketLifecycle(ctx, s.opts.Bucket, cfg))
}

func (s *Store) lifecycleErr(ctx context.Context, err error) error {
	err = s.classify(ctx, "lifecycle of bucket "+s.opts.Bucket, "", err)
	if errors.Is(err, ErrNotSupported) {
		return fmt.Errorf("%w; the G4 TTL sweeper still expires blocks", err)
	}
	return err
}
