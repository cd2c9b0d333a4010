package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/ctxmem/ctxmemd/tiering"
)

// FsckRequest is the body of POST /fsck (every field optional).
type FsckRequest struct {
	// Tiers to check ("G3", "G3.5", "G4"); empty: every tier below G2.
	Tiers []string `json:"tiers,omitempty"`
	// Drop forgets corrupt and missing copies (tiering.FsckOptions.Drop).
	Drop bool `json:"drop,omitempty"`
	// Concurrency is the number of reads at once (default 4, 1–64).
	Concurrency int `json:"concurrency,omitempty"`
	// ReadTimeoutMS bounds each read in milliseconds (default 30000).
	ReadTimeoutMS int64 `json:"read_timeout_ms,omitempty"`
	// BytesPerSecond limits the read rate (0: unlimited).
	BytesPerSecond int64 `json:"bytes_per_second,omitempty"`
	// MaxBad bounds the bad copies listed (default 100).
	MaxBad int `json:"max_bad,omitempty"`
}

// GCRequest is the body of POST /gc (every field optional).
type GCRequest struct {
	// DryRun only reports the garbage found.
	DryRun bool `json:"dry_run,omitempty"`
}

// Fscker checks every block copy below G2 (POST /fsck).
type Fscker interface {
	Fsck(ctx context.Context, req FsckRequest) (tiering.FsckReport, error)
}

// Collector finds and queues for deletion block copies no live block
// uses (POST /gc).
type Collector interface {
	CollectGarbage(ctx context.Context, req GCRequest) (tiering.GCReport, error)
}

// More errors (see status.go for the others).
var (
	// ErrBadRequest: the request's options are not acceptable (HTTP 400);
	// a Provider wraps it, the client returns an error wrapping it.
	ErrBadRequest = errors.New("admin: bad request")
	// ErrBusy: the operation is already running (HTTP 409).
	ErrBusy = errors.New("admin: already running")
)

// maintenance registers POST /fsck and POST /gc on mux.
func maintenance(mux *http.ServeMux, opts Options) {
	mux.HandleFunc("POST /fsck", func(w http.ResponseWriter, r *http.Request) {
		p, ok := opts.Provider.(Fscker)
		if !ok {
			writeErr(w, opts.Logger, r, ErrUnsupported)
			return
		}
		var req FsckRequest
		if !decodeOptional(w, r, &req) {
			return
		}
		if req.Concurrency < 0 || req.Concurrency > 64 || req.ReadTimeoutMS < 0 || req.BytesPerSecond < 0 || req.MaxBad < 0 {
			writeJSON(w, http.StatusBadRequest, errorBody{"want concurrency 0–64 and read_timeout_ms, bytes_per_second, max_bad >= 0"})
			return
		}
		for _, t := range req.Tiers {
			if _, err := tiering.ParseTier(t); err != nil {
				writeJSON(w, http.StatusBadRequest, errorBody{err.Error()})
				return
			}
		}
		rep, err := p.Fsck(r.Context(), req)
		if err != nil {
			writeErr(w, opts.Logger, r, err)
			return
		}
		writeJSON(w, http.StatusOK, rep)
	})
	mux.HandleFunc("POST /gc", func(w http.ResponseWriter, r *http.Request) {
		p, ok := opts.Provider.(Collector)
		if !ok {
			writeErr(w, opts.Logger, r, ErrUnsupported)
			return
		}
		var req GCRequest
		if !decodeOptional(w, r, &req) {
			return
		}
		rep, err := p.CollectGarbage(r.Context(), req)
		if err != nil {
			writeErr(w, opts.Logger, r, err)
			return
		}
		writeJSON(w, http.StatusOK, rep)
	})
}

// decodeOptional decodes a JSON body into v (an empty body leaves v as
// it is); on a bad body it answers 400 and returns false.
func decodeOptional(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		writeJSON(w, http.StatusBadRequest, errorBody{fmt.Sprintf("bad request body: %v", err)})
		return false
	}
	return true
}

// Fsck runs POST /fsck and waits for its report, however long the check
// takes (ctx bounds it; cancelling ctx stops the daemon's check). Errors
// wrap ErrNotRunning, ErrUnsupported, ErrBadRequest or ErrBusy.
func (c *Client) Fsck(ctx context.Context, req FsckRequest) (tiering.FsckReport, error) {
	var rep tiering.FsckReport
	err := c.doWith(ctx, c.long, http.MethodPost, "/fsck", req, &rep)
	return rep, err
}

// CollectGarbage runs POST /gc (bounded by ctx only, like Fsck).
func (c *Client) CollectGarbage(ctx context.Context, req GCRequest) (tiering.GCReport, error) {
	var rep tiering.GCReport
	err := c.doWith(ctx, c.long, http.MethodPost, "/gc", req, &rep)
	return rep, err
}
