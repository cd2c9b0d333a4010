package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a fresh registry holding a Collector over snap, the
// Go runtime and process collectors, and extra (e.g. a *Latencies).
func NewRegistry(snap SnapshotFunc, version string, extra ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(snap, version),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(extra...)
	return reg
}

// Handler serves reg in the Prometheus exposition formats at any path.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError})
}

// Serve listens on addr (host:port; ctxmemd's default is 127.0.0.1:9464)
// and serves /metrics from a NewRegistry(snap, version) until ctx ends. It
// returns nil after ctx ends and the server has shut down, or the listen
// or serve error.
func Serve(ctx context.Context, addr string, snap SnapshotFunc, version string, extra ...prometheus.Collector) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, snap, version, extra...)
}

// ServeListener is Serve on an existing listener (which it closes).
func ServeListener(ctx context.Context, ln net.Listener, snap SnapshotFunc, version string, extra ...prometheus.Collector) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(NewRegistry(snap, version, extra...)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ctxmemd metrics: see /metrics, /healthz, /readyz")
	})
	// /healthz: the daemon's HTTP loop answers (liveness). /readyz: the
	// store keeps its promises (readiness): 503 with the reason when it is
	// degraded (its data directory was deleted under it) or a tier started
	// during its backend's outage still waits for its first listing.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := notReady(snap()); why != "" {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// notReady says why a daemon in state s should not take traffic ("" when
// it should).
func notReady(s Snapshot) string {
	if s.Stats.Degraded != "" {
		return "store degraded: " + s.Stats.Degraded
	}
	for _, t := range s.Tiers {
		if t.Recovering {
			return t.Name + " recovering: started during its backend's outage, first listing pending"
		}
	}
	return ""
}
