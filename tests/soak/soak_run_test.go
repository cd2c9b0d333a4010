//go:build soak

package soak

// TestSoak is built only with -tags soak (make soak): it must be asked
// for, and so never shows as a SKIP in make test.

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctxmem/ctxmemd/tests/harness"
)

func TestSoak(t *testing.T) {
	if os.Getenv("CTXMEM_SOAK") != "1" {
		t.Skip("crash soak: set CTXMEM_SOAK=1 (or run make soak); needs root and /dev/fuse")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the soak needs root (FUSE mount with allow_other)")
	}
	cycles := envInt("CTXMEM_SOAK_CYCLES", 1000)
	epochLen := envInt("CTXMEM_SOAK_EPOCH", 40)
	var deadline time.Time
	if v := os.Getenv("CTXMEM_SOAK_DURATION"); v != "" {
		dur, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CTXMEM_SOAK_DURATION: %v", err)
		}
		deadline = time.Now().Add(dur)
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("CTXMEM_SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			t.Fatalf("CTXMEM_SOAK_SEED: %v", err)
		}
		seed = n
	}
	profNames := strings.Split(envOr("CTXMEM_SOAK_PROFILES", "tiny,small,g4,roomy"), ",")
	for _, p := range profNames {
		if _, ok := profiles[p]; !ok {
			t.Fatalf("CTXMEM_SOAK_PROFILES: unknown profile %q", p)
		}
	}
	s := &soak{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)),
		keep: envOr("CTXMEM_SOAK_KEEP", "/var/tmp/ctxmem-soak")}
	s.st.Kills = map[string]int{}
	s.snapshot = os.Getenv("CTXMEM_SOAK_SNAPSHOT") == "1"
	s.noNBD = os.Getenv("CTXMEM_SOAK_NBD") == "0"
	s.envNoNBD = s.noNBD
	s.noDiscard = os.Getenv("CTXMEM_SOAK_DISCARD") == "0"
	s.bin = os.Getenv("CTXMEM_E2E_BIN")
	if s.bin == "" {
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		bin, err := harness.BuildBinary(ctx, dir)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		s.bin = bin
	}
	t.Logf("soak: seed %#x, %d cycles, %d cycles per data dir, profiles %v, NBD %v (discards %v), binary %s", seed, cycles, epochLen, profNames, !s.noNBD, !s.noDiscard, s.bin)
	start := time.Now()
	for s.cycle = 1; s.cycle <= cycles; s.cycle++ {
		if !deadline.IsZero() && time.Now().After(deadline) {
			t.Logf("soak: duration reached after %d cycles", s.cycle-1)
			break
		}
		if s.d == nil || (s.cycle-1)%epochLen == 0 {
			if s.d != nil {
				s.endEpoch()
			}
			s.epoch++
			s.newEpoch(profiles[profNames[(s.epoch-1)%len(profNames)]])
		} else {
			s.startAgain()
		}
		s.runCycle()
		s.st.Cycles++
		if s.cycle%25 == 0 {
			t.Logf("soak: cycle %d (%s, %.2f s/cycle): %s", s.cycle, time.Since(start).Round(time.Second),
				time.Since(start).Seconds()/float64(s.cycle), s.summary())
		}
	}
	if s.d != nil {
		s.endEpoch()
	}
	el := time.Since(start)
	t.Logf("soak: DONE seed %#x: %d cycles in %s (%.2f s/cycle)\n%s", seed, s.st.Cycles, el.Round(time.Second),
		el.Seconds()/float64(max(1, s.st.Cycles)), s.report())
}
