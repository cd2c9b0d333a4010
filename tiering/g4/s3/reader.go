package s3

import (
	"context"
	"fmt"
	"io"
)

// exactReader yields the first left bytes of r and fails (errSizeMismatch)
// if r ends early or holds more: before handing out the final bytes it
// reads one byte further, so an upload fed by it never completes with the
// wrong length.
type exactReader struct {
	r    io.Reader
	left int64
	done bool
}

// Read implements io.Reader.
func (e *exactReader) Read(p []byte) (int, error) {
	if e.done {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if int64(len(p)) < e.left {
		n, err := e.r.Read(p)
		e.left -= int64(n)
		if err == io.EOF {
			return n, fmt.Errorf("%w: ended %d bytes early", errSizeMismatch, e.left)
		}
		return n, err
	}
	n, err := io.ReadFull(e.r, p[:e.left])
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return 0, fmt.Errorf("%w: ended %d bytes early", errSizeMismatch, e.left-int64(n))
		}
		return 0, err
	}
	var one [1]byte
	for {
		m, err := e.r.Read(one[:])
		if m > 0 {
			return 0, fmt.Errorf("%w: more bytes than the size given", errSizeMismatch)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	e.left, e.done = 0, true
	return n, nil
}

// objectReader is the body of a Get or GetRange: read errors are mapped
// like call errors (a cut connection or stall wraps tier.ErrUnavailable,
// the caller's cancellation passes through).
type objectReader struct {
	rc   io.ReadCloser
	body io.Reader // rc, or a skipping/clipping view of it; nil means rc
	s    *Store
	ctx  context.Context
	name string
}

// Read implements io.Reader, mapping errors (see objectReader).
func (o *objectReader) Read(p []byte) (int, error) {
	r := o.body
	if r == nil {
		r = o.rc
	}
	n, err := r.Read(p)
	if err != nil && err != io.EOF {
		err = o.s.classify(o.ctx, "read", o.name, err)
	}
	return n, err
}

// Close closes the response body.
func (o *objectReader) Close() error { return o.rc.Close() }
