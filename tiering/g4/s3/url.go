package s3

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// URL query parameters understood by ParseURL.
var urlParams = []string{
	"endpoint", "region", "path_style", "insecure", "ca", "timeout", "retries",
	"part_size", "create_bucket", "profile", "credentials_file",
}

// ParseURL parses a G4 location of the form
//
//	s3://BUCKET[/PREFIX][?endpoint=HOST:PORT&region=R&path_style=true|false
//	    &insecure=true&ca=/path/ca.pem&timeout=2s&retries=2&part_size=16777216
//	    &create_bucket=true&profile=P&credentials_file=/path]
//
// into Options. endpoint may carry a scheme (http://, https://); insecure=true
// selects plain HTTP; path_style=true is path-style, false virtual-host,
// absent auto; timeout is a Go duration; part_size is in bytes. Credentials
// are never taken from the URL (use the config, AWS_* variables or a
// shared credentials file): a URL with user info or key parameters is an
// error, as is any unknown or repeated parameter. Defaults are applied by
// New, not here.
func ParseURL(raw string) (Options, error) {
	var o Options
	u, err := url.Parse(raw)
	if err != nil {
		return o, fmt.Errorf("s3 url: %w", err)
	}
	if u.Scheme != "s3" {
		return o, fmt.Errorf("s3 url %q: scheme must be s3://", raw)
	}
	if u.User != nil {
		return o, fmt.Errorf("s3 url: credentials in the URL are not accepted; use the config file, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a shared credentials file")
	}
	if u.Opaque != "" || u.Host == "" {
		return o, fmt.Errorf("s3 url %q: want s3://bucket[/prefix]", raw)
	}
	if u.Port() != "" {
		return o, fmt.Errorf("s3 url %q: the host part is the bucket; give the server as ?endpoint=host:port", raw)
	}
	if u.Fragment != "" {
		return o, fmt.Errorf("s3 url %q: unexpected fragment", raw)
	}
	o.Bucket = u.Host
	o.Prefix = strings.Trim(u.Path, "/")
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return o, fmt.Errorf("s3 url query: %w", err)
	}
	for k, vs := range q {
		if !slices.Contains(urlParams, k) {
			if strings.Contains(strings.ToLower(k), "key") || strings.Contains(strings.ToLower(k), "secret") {
				return o, fmt.Errorf("s3 url: parameter %q: credentials in the URL are not accepted; use the config file, AWS_* variables or a shared credentials file", k)
			}
			return o, fmt.Errorf("s3 url: unknown parameter %q (known: %s)", k, strings.Join(urlParams, ", "))
		}
		if len(vs) != 1 {
			return o, fmt.Errorf("s3 url: parameter %q given %d times", k, len(vs))
		}
	}
	get := q.Get
	o.Endpoint = get("endpoint")
	o.Region = get("region")
	o.CAFile = get("ca")
	o.Profile = get("profile")
	o.CredentialsFile = get("credentials_file")
	boolParam := func(name string, dst *bool) error {
		if !q.Has(name) {
			return nil
		}
		b, err := strconv.ParseBool(get(name))
		if err != nil {
			return fmt.Errorf("s3 url: %s=%q: want true or false", name, get(name))
		}
		*dst = b
		return nil
	}
	if q.Has("path_style") {
		var ps bool
		if err := boolParam("path_style", &ps); err != nil {
			return o, err
		}
		o.Addressing = AddressVirtualHost
		if ps {
			o.Addressing = AddressPath
		}
	}
	if err := boolParam("insecure", &o.Insecure); err != nil {
		return o, err
	}
	if err := boolParam("create_bucket", &o.CreateBucket); err != nil {
		return o, err
	}
	if q.Has("timeout") {
		d, err := time.ParseDuration(get("timeout"))
		if err != nil || d <= 0 {
			return o, fmt.Errorf("s3 url: timeout=%q: want a positive duration such as 2s", get("timeout"))
		}
		o.Timeout = d
	}
	if q.Has("retries") {
		n, err := strconv.Atoi(get("retries"))
		if err != nil || n < 0 {
			return o, fmt.Errorf("s3 url: retries=%q: want a count >= 0", get("retries"))
		}
		o.Retries = n
		if n == 0 {
			o.Retries = -1 // explicit "no retries"
		}
	}
	if q.Has("part_size") {
		n, err := strconv.ParseInt(get("part_size"), 10, 64)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("s3 url: part_size=%q: want a byte count", get("part_size"))
		}
		o.PartSize = n
	}
	return o, nil
}
