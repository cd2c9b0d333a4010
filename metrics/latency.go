package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LatencyBuckets are the upper bounds, in seconds, of the request latency
// histograms: 10 µs doubling to about 5 s (20 buckets), so that both a
// FUSE request served from G2 and one that waits for S3 land inside.
func LatencyBuckets() []float64 { return prometheus.ExponentialBuckets(10e-6, 2, 20) }

// Latencies are the daemon's request latency histograms, one per front
// end, labelled by operation:
//
//	ctxmem_fuse_request_duration_seconds{op}  FUSE requests the daemon served
//	ctxmem_nbd_request_duration_seconds{op}   NBD transmission requests
//
// The daemon makes one with NewLatencies, hands ObserveFUSE and ObserveNBD
// to the front ends, and passes it to ServeListener, which registers it.
// It is a prometheus.Collector; Observe calls are safe for concurrent use
// and cost one atomic histogram update.
type Latencies struct {
	fuse, nbd *prometheus.HistogramVec
}

// NewLatencies returns empty histograms.
func NewLatencies() *Latencies {
	mk := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help,
			Buckets: LatencyBuckets()}, []string{"op"})
	}
	return &Latencies{
		fuse: mk("fuse_request_duration_seconds", "Time the daemon took to answer a FUSE request, by op "+
			"(lookup, open, create, read, write, flush, fsync, release, getattr, setattr, unlink, rename, mkdir). "+
			"Passthrough reads and writes never reach the daemon and are not here."),
		nbd: mk("nbd_request_duration_seconds", "Time the daemon took to execute an NBD transmission request, by op "+
			"(read, write, flush, trim, write_zeroes, block_status, other)."),
	}
}

// ObserveFUSE records one FUSE request of op that took d.
func (l *Latencies) ObserveFUSE(op string, d time.Duration) {
	l.fuse.WithLabelValues(op).Observe(d.Seconds())
}

// ObserveNBD records one NBD request of op that took d.
func (l *Latencies) ObserveNBD(op string, d time.Duration) {
	l.nbd.WithLabelValues(op).Observe(d.Seconds())
}

// Describe implements prometheus.Collector.
func (l *Latencies) Describe(ch chan<- *prometheus.Desc) {
	l.fuse.Describe(ch)
	l.nbd.Describe(ch)
}

// Collect implements prometheus.Collector.
func (l *Latencies) Collect(ch chan<- prometheus.Metric) {
	l.fuse.Collect(ch)
	l.nbd.Collect(ch)
}
