package poolkv

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxmem/ctxmemd/internal/clock"
	"github.com/ctxmem/ctxmemd/sidecar/bus"
)

// newFakeClock is the tests' settable clock (shared by leasers and
// writers, or one per simulated host).
func newFakeClock() *clock.Fake { return clock.NewFake(time.Unix(1_700_000_000, 0)) }

// logBuf is a goroutine-safe log sink for slog.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newLog() (*slog.Logger, *logBuf) {
	b := &logBuf{}
	return slog.New(slog.NewTextHandler(b, nil)), b
}

// startBus starts an embedded NATS server with JetStream in dir; listen
// "" means in-process connections only.
func startBus(tb testing.TB, dir, listen string) *bus.Embedded {
	tb.Helper()
	emb, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: dir, Listen: listen})
	if err != nil {
		tb.Fatal(err)
	}
	return emb
}

// freePort returns a loopback "127.0.0.1:port" nobody listens on.
func freePort(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// connect opens a client connection (in-process unless url is set) that
// the test closes at the end.
func connect(tb testing.TB, emb *bus.Embedded, url string) *nats.Conn {
	tb.Helper()
	o := bus.Options{Name: tb.Name(), ReconnectWait: 50 * time.Millisecond, Log: slog.New(slog.DiscardHandler)}
	if url != "" {
		o.URL = url
	} else {
		o.Embedded = emb
	}
	nc, err := bus.Connect(o, false)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// buckets ensures the pool buckets of cluster "t" on nc.
func buckets(tb testing.TB, nc *nats.Conn) (leases, index jetstream.KeyValue) {
	tb.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leases, index, err = EnsureBuckets(ctx, js, "t", 1)
	if err != nil {
		tb.Fatal(err)
	}
	return leases, index
}

// busWithBuckets is an in-process server plus one connection's buckets.
func busWithBuckets(tb testing.TB) (*bus.Embedded, jetstream.KeyValue, jetstream.KeyValue) {
	tb.Helper()
	emb := startBus(tb, tb.TempDir(), "")
	tb.Cleanup(emb.Shutdown)
	l, i := buckets(tb, connect(tb, emb, ""))
	return emb, l, i
}
