package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Defaults of Options.
const (
	// DefaultBuffer is the number of batches kept for replay (vLLM's
	// buffer_steps default).
	DefaultBuffer = 10000
	// DefaultHWM bounds the batches queued for the PUB socket; past it
	// batches are dropped for the subscribers (they recover by replay).
	DefaultHWM = 100000
)

// EndSeq ends a replay answer: -1 as 8 bytes big-endian.
var EndSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Options configure a Publisher.
type Options struct {
	// Endpoint is the PUB socket's address, bound: tcp://host:port
	// (host "*" or empty for every interface, port 0 for any), or
	// ipc:///path.
	Endpoint string
	// ReplayEndpoint is the ROUTER socket's address (same forms); empty
	// turns replay off.
	ReplayEndpoint string
	// Topic is the first frame of every message ("" = vLLM's default).
	Topic string
	// Buffer is how many batches replay keeps (0 = DefaultBuffer).
	Buffer int
	// HWM bounds the PUB send queue in batches (0 = DefaultHWM).
	HWM int
	// Bus, when set, also receives every batch: its sequence and the
	// same msgpack payload (the daemon publishes it on NATS). It is
	// called on the publishing goroutine and must not block for long.
	Bus func(seq uint64, payload []byte)
	// Logger (nil = slog.Default()).
	Logger *slog.Logger
}

// Publisher sends batches on a ZMQ PUB socket and answers replay requests
// on an optional ROUTER socket. Publish is safe for concurrent use.
type Publisher struct {
	opts   Options
	log    *slog.Logger
	cancel context.CancelFunc
	pub    zmq4.Socket
	replay zmq4.Socket
	done   chan struct{}

	mu     sync.Mutex
	seq    uint64     // next sequence number
	ring   []buffered // replay buffer, oldest at head
	head   int
	n      int
	closed bool
}

type buffered struct {
	seq     uint64
	payload []byte
}

// Listen binds the sockets (an address in use is an error here, before
// anything is published) and returns the publisher. The sequence starts
// at 0.
func Listen(ctx context.Context, opts Options) (*Publisher, error) {
	if opts.Endpoint == "" {
		return nil, errors.New("kvevents: no endpoint")
	}
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.HWM <= 0 {
		opts.HWM = DefaultHWM
	}
	p := &Publisher{opts: opts, log: opts.Logger, ring: make([]buffered, opts.Buffer), done: make(chan struct{})}
	if p.log == nil {
		p.log = slog.Default()
	}
	// The sockets live until Close, not until ctx ends.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	p.pub = zmq4.NewPub(sctx)
	if err := p.pub.SetOption(zmq4.OptionHWM, opts.HWM); err != nil {
		p.abort()
		return nil, fmt.Errorf("kvevents: PUB high-water mark: %w", err)
	}
	if err := p.pub.Listen(opts.Endpoint); err != nil {
		p.abort()
		return nil, fmt.Errorf("kvevents: PUB %s: %w", opts.Endpoint, err)
	}
	if opts.ReplayEndpoint != "" {
		p.replay = zmq4.NewRouter(sctx, zmq4.WithTimeout(5*time.Second))
		if err := p.replay.Listen(opts.ReplayEndpoint); err != nil {
			p.abort()
			return nil, fmt.Errorf("kvevents: replay ROUTER %s: %w", opts.ReplayEndpoint, err)
		}
		go p.serveReplay(sctx)
	} else {
		close(p.done)
	}
	return p, nil
}

func (p *Publisher) abort() {
	p.cancel()
	p.pub.Close()
	if p.replay != nil {
		p.replay.Close()
	}
}

// Addr is the PUB socket's bound address (the port chosen for port 0).
func (p *Publisher) Addr() net.Addr { return p.pub.Addr() }

// ReplayAddr is the ROUTER socket's bound address (nil without replay).
func (p *Publisher) ReplayAddr() net.Addr {
	if p.replay == nil {
		return nil
	}
	return p.replay.Addr()
}

// Publish encodes events as one batch with the next sequence number,
// sends it, keeps it for replay and hands it to Options.Bus. It returns
// the sequence number used.
func (p *Publisher) Publish(events []Event) (uint64, error) {
	payload, err := Encode(Batch{TS: time.Now(), Events: events})
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, errors.New("kvevents: publisher closed")
	}
	seq := p.seq
	p.seq++
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], seq)
	// Send only queues (the PUB writer goroutine does the I/O); a
	// subscriber-less socket drops the message, as ZMQ PUB does.
	if err := p.pub.SendMulti(zmq4.NewMsgFrom([]byte(p.opts.Topic), sb[:], payload)); err != nil {
		p.log.Debug("kvevents: PUB send", "seq", seq, "err", err)
	}
	p.push(buffered{seq, payload})
	if p.opts.Bus != nil {
		p.opts.Bus(seq, payload)
	}
	return seq, nil
}

// push appends b to the ring, dropping the oldest when full; p.mu held.
func (p *Publisher) push(b buffered) {
	i := (p.head + p.n) % len(p.ring)
	p.ring[i] = b
	if p.n < len(p.ring) {
		p.n++
	} else {
		p.head = (p.head + 1) % len(p.ring)
	}
}

// since copies the buffered batches with seq ≥ start, oldest first.
func (p *Publisher) since(start uint64) []buffered {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []buffered
	for k := range p.n {
		b := p.ring[(p.head+k)%len(p.ring)]
		if b.seq >= start {
			out = append(out, b)
		}
	}
	return out
}

// serveReplay answers replay requests until the sockets close.
func (p *Publisher) serveReplay(ctx context.Context) {
	defer close(p.done)
	for {
		msg, err := p.replay.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Debug("kvevents: replay receive", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		// [identity, ("",) start]: REQ and DEALER clients both work.
		f := msg.Frames
		if len(f) < 2 || len(f[len(f)-1]) != 8 {
			p.log.Debug("kvevents: malformed replay request", "frames", len(f))
			continue
		}
		id := f[0]
		start := binary.BigEndian.Uint64(f[len(f)-1])
		for _, b := range p.since(start) {
			var sb [8]byte
			binary.BigEndian.PutUint64(sb[:], b.seq)
			if err := p.replay.SendMulti(zmq4.NewMsgFrom(id, nil, sb[:], b.payload)); err != nil {
				p.log.Debug("kvevents: replay send", "err", err)
				break
			}
		}
		if err := p.replay.SendMulti(zmq4.NewMsgFrom(id, nil, EndSeq, nil)); err != nil {
			p.log.Debug("kvevents: replay send", "err", err)
		}
	}
}

// Close closes the sockets (batches still queued for the PUB socket may
// be lost) and waits for the replay server to stop, or for ctx.
func (p *Publisher) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	err := p.pub.Close()
	if p.replay != nil {
		if e := p.replay.Close(); err == nil {
			err = e
		}
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}
