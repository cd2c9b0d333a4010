// Package s3test runs a real S3 server for tests: versitygw
// (github.com/versity/versitygw) with its posix backend serving a temporary
// directory on 127.0.0.1, path-style, region us-east-1, over plain HTTP
// (StartServer) or HTTPS with a test CA (StartTLSServer). Each Server is one
// child process owned by the test that started it and killed in t.Cleanup;
// tests may stop, restart (same port, same directory), pause and resume it
// to simulate outages.
//
// The binary is found, in order, at $CTXMEM_VERSITYGW, on $PATH, and in
// $(go env GOPATH)/bin. Install it with
//
//	go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
//
// When it is missing, StartServer skips the test, or fails it if
// CTXMEM_REQUIRE_TOOLS=1 (CI).
//
// CTXMEM_VERSITYGW_IO_BUFFER=N passes --io-buffer-size N to the posix
// backend (its default is 1 MiB). It matters for ranged GETs: versitygw
// sends a whole object with sendfile, but a range through a buffer of
// that size allocated per request, which costs a 256 KiB range about
// twice a whole 256 KiB object (BenchmarkPackedSink; 64 KiB brings it
// near 1x).
//
// Benchmarks may measure another S3 server instead (StartBenchServer:
// $CTXMEM_S3_BENCH_ENDPOINT and its keys).
package s3test

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Fixed settings of every test server.
const (
	Bucket    = "ctxmem-test"     // bucket created at start
	Region    = "us-east-1"       // versitygw's default region
	AccessKey = "ctxmemtestAK"    // root access key
	SecretKey = "ctxmemtestSKsk1" // root secret key
	// VersityVersion is the versitygw release the tests are written for.
	VersityVersion = "v1.8.0"
	// readyTimeout bounds how long a start may take until the server
	// answers S3 requests.
	readyTimeout = 30 * time.Second
)

// IOBuffer returns the posix backend's --io-buffer-size (bytes) the
// server runs with, "" for versitygw's default (1 MiB).
func (s *Server) IOBuffer() string { return s.ioBuffer }

// Server is one versitygw process. Its fields are fixed for its lifetime;
// Stop, Start, Pause and Resume may be called from the test goroutine in
// any order.
type Server struct {
	Endpoint  string // "127.0.0.1:PORT" (plain HTTP, path-style)
	AccessKey string
	SecretKey string
	Bucket    string
	Dir       string // posix backend root; the bucket is the directory Dir/Bucket
	// CAFile is the PEM file of the CA that signed the server's
	// certificate when the server speaks HTTPS (StartTLSServer); "" for
	// plain HTTP.
	CAFile string
	// External is true for a server this package did not start
	// (StartBenchServer with $CTXMEM_S3_BENCH_ENDPOINT).
	External bool

	bin      string
	ioBuffer string // --io-buffer-size of the posix backend; "" for its default
	cert     string // server certificate and key files (HTTPS only)
	key      string
	logPath  string
	tb       testing.TB

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
}

// Binary returns the path of the versitygw executable, looked up at
// $CTXMEM_VERSITYGW, on $PATH, then in $(go env GOPATH)/bin.
func Binary() (string, error) {
	if p := os.Getenv("CTXMEM_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("CTXMEM_VERSITYGW=%s: %w", p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	gopath := os.Getenv("GOPATH")
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		gopath = strings.TrimSpace(string(out))
	}
	if gopath == "" {
		if home, err := os.UserHomeDir(); err == nil {
			gopath = filepath.Join(home, "go")
		}
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("versitygw not found ($CTXMEM_VERSITYGW, $PATH, $(go env GOPATH)/bin); install with: go install github.com/versity/versitygw/cmd/versitygw@" + VersityVersion)
}

// StartServer starts a versitygw on a free 127.0.0.1 port serving a new
// temporary directory, creates Bucket and waits until the server answers.
// The server is killed when the test ends. Without the binary the test is
// skipped (failed if CTXMEM_REQUIRE_TOOLS=1).
func StartServer(tb testing.TB) *Server {
	tb.Helper()
	return start(tb, false)
}

// StartTLSServer is StartServer with HTTPS: the server's certificate (for
// 127.0.0.1) is signed by a new test CA whose PEM file is CAFile.
func StartTLSServer(tb testing.TB) *Server {
	tb.Helper()
	return start(tb, true)
}

func start(tb testing.TB, tls bool) *Server {
	tb.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("CTXMEM_REQUIRE_TOOLS") == "1" {
			tb.Fatalf("s3test: %v", err)
		}
		tb.Skipf("s3test: %v", err)
	}
	root := tb.TempDir()
	s := &Server{
		AccessKey: AccessKey, SecretKey: SecretKey, Bucket: Bucket,
		Dir: filepath.Join(root, "data"), bin: bin, logPath: filepath.Join(root, "versitygw.log"), tb: tb,
	}
	if v := os.Getenv("CTXMEM_VERSITYGW_IO_BUFFER"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n <= 0 {
			tb.Fatalf("s3test: CTXMEM_VERSITYGW_IO_BUFFER=%q: want a number of bytes > 0", v)
		}
		s.ioBuffer = v
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if tls {
		s.CAFile, s.cert, s.key = filepath.Join(root, "ca.pem"), filepath.Join(root, "cert.pem"), filepath.Join(root, "key.pem")
		if err := writeCerts(s.CAFile, s.cert, s.key); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(s.Stop)
	var lastErr error
	for range 3 { // a free port can be taken between probe and bind
		port, err := freePort()
		if err != nil {
			tb.Fatal(err)
		}
		s.Endpoint = "127.0.0.1:" + strconv.Itoa(port)
		if lastErr = s.Start(); lastErr == nil {
			break
		}
		s.Stop()
	}
	if lastErr != nil {
		tb.Fatalf("s3test: %v\n%s", lastErr, s.logTail())
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := s.Client().MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: Region}); err != nil {
		tb.Fatalf("s3test: make bucket %s: %v\n%s", s.Bucket, err, s.logTail())
	}
	return s
}

// Environment of StartBenchServer: an S3 server the caller runs (another
// implementation, or the object store a deployment will use).
const (
	EnvBenchEndpoint  = "CTXMEM_S3_BENCH_ENDPOINT"   // host:port, plain HTTP, path-style
	EnvBenchAccessKey = "CTXMEM_S3_BENCH_ACCESS_KEY" // its access key
	EnvBenchSecretKey = "CTXMEM_S3_BENCH_SECRET_KEY" // its secret key
)

// StartBenchServer is StartServer for benchmarks, which may measure
// another S3 server: with $CTXMEM_S3_BENCH_ENDPOINT set it starts nothing
// and returns that server (keys from $CTXMEM_S3_BENCH_ACCESS_KEY and
// $CTXMEM_S3_BENCH_SECRET_KEY, region Region) with a new bucket
// "ctxmem-bench-<unix nanoseconds>" made on it, which is left there. Such
// a Server is External: it has no process (Stop is a no-op, Start fails,
// Pause and Resume fail) and no Dir.
func StartBenchServer(tb testing.TB) *Server {
	tb.Helper()
	ep := os.Getenv(EnvBenchEndpoint)
	if ep == "" {
		return start(tb, false)
	}
	s := &Server{Endpoint: ep, AccessKey: os.Getenv(EnvBenchAccessKey), SecretKey: os.Getenv(EnvBenchSecretKey),
		Bucket: fmt.Sprintf("ctxmem-bench-%d", time.Now().UnixNano()), External: true, tb: tb}
	if s.AccessKey == "" || s.SecretKey == "" {
		tb.Fatalf("s3test: %s=%s needs %s and %s", EnvBenchEndpoint, ep, EnvBenchAccessKey, EnvBenchSecretKey)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := s.Client().MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: Region}); err != nil {
		tb.Fatalf("s3test: make bucket %s on %s: %v", s.Bucket, ep, err)
	}
	return s
}

// Start returns the endpoint, keys and backing directory of a new server
// (see StartServer) and a function that stops it early; the bucket is
// Bucket. The server is also stopped when the test ends.
func Start(tb testing.TB) (endpoint, ak, sk, dir string, stop func()) {
	tb.Helper()
	s := StartServer(tb)
	return s.Endpoint, s.AccessKey, s.SecretKey, s.Dir, s.Stop
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start (re)starts the server process on its endpoint and directory and
// waits until it answers S3 requests. Starting a running server is a no-op.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.External {
		return errors.New("s3test: an external server is not started here")
	}
	if s.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := []string{"--port", s.Endpoint, "--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", Region, "--quiet", "--keep-alive"}
	if s.cert != "" {
		args = append(args, "--cert", s.cert, "--key", s.key)
	}
	args = append(args, "posix")
	if s.ioBuffer != "" {
		args = append(args, "--io-buffer-size", s.ioBuffer)
	}
	cmd := exec.Command(s.bin, append(args, s.Dir)...)
	// A minimal environment: no VGW_* or ROOT_* settings of the caller leak in.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Dir(s.Dir)}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { // owned by the Server: ends when the process exits
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	if err := s.waitReady(exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		s.cmd = nil
		return err
	}
	return nil
}

// waitReady polls the server with S3 requests until one is answered.
func (s *Server) waitReady(exited <-chan struct{}) error {
	c := s.Client()
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.BucketExists(ctx, s.Bucket)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("versitygw on %s exited during start: %v", s.Endpoint, err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw on %s not ready after %v: %v", s.Endpoint, readyTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server process (SIGKILL, as a crash would) and waits for
// it to exit. The directory is kept, so Start brings the same data back.
// Stopping a stopped server is a no-op.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill() // SIGKILL also ends a stopped (paused) process
	<-s.exited
	s.cmd = nil
}

// Pause freezes the server process (SIGSTOP): connections are still
// accepted by the kernel but never answered, as with a hung server.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("s3test: server not running")
	}
	return s.cmd.Process.Signal(sig)
}

// Client returns a minio-go client for the server (path-style, the root
// keys, default retries, trusting CAFile over HTTPS).
func (s *Server) Client() *minio.Client {
	opts := &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region:       Region,
		BucketLookup: minio.BucketLookupPath,
	}
	if s.CAFile != "" {
		tr, err := minio.DefaultTransport(true)
		if err != nil {
			s.tb.Fatal(err)
		}
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			s.tb.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tr.TLSClientConfig.RootCAs = pool
		opts.Secure, opts.Transport = true, tr
	}
	c, err := minio.New(s.Endpoint, opts)
	if err != nil {
		s.tb.Fatalf("s3test: client: %v", err)
	}
	return c
}

// ObjectPath returns the file that holds object key of the bucket in the
// posix backend (versitygw maps key "a/b/c" to Dir/Bucket/a/b/c).
func (s *Server) ObjectPath(key string) string {
	return filepath.Join(s.Dir, s.Bucket, filepath.FromSlash(key))
}

// logTail returns the end of the server's log, for failure messages.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(bytes.TrimSpace(b))
}

// Log returns the end of the server's log (stdout and stderr).
func (s *Server) Log() string { return s.logTail() }
