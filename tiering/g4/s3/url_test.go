package s3

import (
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	o, err := ParseURL("s3://my-bucket/ctx/g4/?endpoint=127.0.0.1:9000&region=eu-west-1&path_style=true&insecure=true" +
		"&ca=/etc/ca.pem&timeout=3s&retries=4&part_size=8388608&create_bucket=1&profile=p&credentials_file=/c")
	if err != nil {
		t.Fatal(err)
	}
	want := Options{
		Endpoint: "127.0.0.1:9000", Bucket: "my-bucket", Prefix: "ctx/g4", Region: "eu-west-1",
		Addressing: AddressPath, Insecure: true, CAFile: "/etc/ca.pem", Timeout: 3 * time.Second, Retries: 4,
		PartSize: 8 << 20, CreateBucket: true, Profile: "p", CredentialsFile: "/c",
	}
	if o != want {
		t.Fatalf("ParseURL =\n%+v\nwant\n%+v", o, want)
	}
	for raw, check := range map[string]func(Options) bool{
		"s3://b":                        func(o Options) bool { return o.Bucket == "b" && o.Prefix == "" && o.Addressing == AddressAuto },
		"s3://b/":                       func(o Options) bool { return o.Prefix == "" },
		"s3://b/a%20b/%25":              func(o Options) bool { return o.Prefix == "a b/%" },
		"s3://b?path_style=false":       func(o Options) bool { return o.Addressing == AddressVirtualHost },
		"s3://b?retries=0":              func(o Options) bool { return o.Retries < 0 },
		"s3://b?endpoint=https://h:443": func(o Options) bool { return o.Endpoint == "https://h:443" },
	} {
		o, err := ParseURL(raw)
		if err != nil || !check(o) {
			t.Errorf("ParseURL(%q) = %+v, %v", raw, o, err)
		}
	}
	for raw, msg := range map[string]string{
		"file:///x":                         "scheme",
		"s3://ak:sk@bucket":                 "credentials",
		"s3://b?access_key=x":               "credentials",
		"s3://b?secret=x":                   "credentials",
		"s3://b?endpiont=x":                 "unknown parameter",
		"s3://b?region=a&region=b":          "2 times",
		"s3://b?timeout=fast":               "timeout",
		"s3://b?timeout=-1s":                "timeout",
		"s3://b?retries=-1":                 "retries",
		"s3://b?path_style=maybe":           "path_style",
		"s3://b:9000/x":                     "endpoint=host:port",
		"s3:///prefix":                      "bucket",
		"s3://b?part_size=16MiB":            "part_size",
		"s3://b#frag":                       "fragment",
		"s3://b?insecure=yes&endpoint=h:80": "insecure",
	} {
		if _, err := ParseURL(raw); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseURL(%q) = %v; want an error about %q", raw, err, msg)
		}
	}
}

func TestNormalize(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	o := Options{Bucket: "bkt", Prefix: "/p/q/"}
	host, secure, err := o.normalize()
	if err != nil || host != DefaultEndpoint || !secure || o.Prefix != "p/q" || o.Timeout != DefaultTimeout ||
		o.Retries != DefaultRetries || o.PartSize != DefaultPartSize || o.Region != "" {
		t.Fatalf("defaults: %q %v %v %+v", host, secure, err, o)
	}
	t.Setenv("AWS_ENDPOINT_URL", "http://minio.local:9000")
	t.Setenv("AWS_REGION", "r1")
	o = Options{Bucket: "bkt", Retries: -1}
	if host, secure, err := o.normalize(); err != nil || host != "minio.local:9000" || secure || o.Region != "r1" || o.Retries != 0 {
		t.Fatalf("from env: %q %v %v %+v", host, secure, err, o)
	}
	o = Options{Bucket: "bkt", Endpoint: "https://h", Insecure: true}
	if host, secure, err := o.normalize(); err != nil || host != "h" || !secure {
		t.Fatalf("scheme overrides Insecure: %q %v %v", host, secure, err)
	}
	for _, bad := range []Options{
		{},
		{Bucket: "b"},
		{Bucket: "bad..bucket"},
		{Bucket: "bkt", Endpoint: "ftp://h"},
		{Bucket: "bkt", Endpoint: "http://h/path"},
		{Bucket: "bkt", Endpoint: "h:port:x"},
		{Bucket: "bkt", Prefix: "a//b"},
		{Bucket: "bkt", Prefix: "a/../b"},
		{Bucket: "bkt", AccessKey: "ak"},
		{Bucket: "bkt", Timeout: -time.Second},
		{Bucket: "bkt", PartSize: 1 << 20},
		{Bucket: "bkt", Retries: 11},
		{Bucket: "bkt", Addressing: 7},
	} {
		if _, _, err := bad.normalize(); err == nil {
			t.Errorf("normalize(%+v) accepted", bad)
		}
	}
	if s := (Options{Bucket: "bkt", Prefix: "p", Endpoint: "h:1", Insecure: true, SecretKey: "SECRET"}).String(); strings.Contains(s, "SECRET") || !strings.Contains(s, "s3://bkt/p at http://h:1") {
		t.Fatalf("String() = %q", s)
	}
}
