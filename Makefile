# ctxmemd — build, run, test, bench.
#
#   make run     build and run the daemon on the embedded default (foreground)
#   make test    vet, format check, unit + conformance + end-to-end tests (-race)
#   make bench   benchmarks (Go benchmarks, fio and KV jobs on tmpfs vs the
#                mount vs go-fuse loopback, trace replay, NBD, ...); long, not
#                part of make test. Quick look: make bench BENCH_ONLY=fio QUICK=1
#                Metadata at scale (issue 17): make bench BENCH_ONLY=meta
#                META_FILES=1000000 (QUICK=1: 100,000 files)
#   make fuzz    every fuzz target for FUZZTIME each (default 5m; see
#                tests/fuzz.sh); long, not part of make test
#   make man     the manual page, build/ctxmemd.1.gz (from `ctxmemd man`)
#   make soak    crash soak: kill -9 / restart / verify cycles through the
#                mount and the NBD export (SOAK_CYCLES, SOAK_DURATION);
#                long, not part of make test

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
BIN      := bin/ctxmemd
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
TEST_TIMEOUT ?= 40m
FUZZTIME ?= 5m

# Debian packages the daemon and the tests need.
RUN_PKGS  := fuse3 attr
TEST_PKGS := gcc fuse3 attr fio jq util-linux iproute2 e2fsprogs libnbd-bin python3-libnbd qemu-utils nbdkit rpm lintian python3-zmq python3-msgpack

# Test servers built from the Go module proxy (the S3 server for G4 tests).
VERSITYGW := github.com/versity/versitygw/cmd/versitygw@v1.8.0
NFPM      := github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
# The NATS server the multi-host control-plane tests run (Debian's is too
# old: no key-value TTLs).
NATSSRV   := github.com/nats-io/nats-server/v2@v2.15.2
GOBIN_DIR := $(shell $(GO) env GOPATH)/bin

.PHONY: all build run test bench soak fuzz deps-run deps-test vet fmt-check clean deb rpm pkg-bin man

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/ctxmemd

# apt-get only what is missing, so repeated runs need no network.
define apt_install
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
endef

deps-run:
	$(call apt_install,$(RUN_PKGS))

deps-test:
	$(call apt_install,$(TEST_PKGS))
	@[ -x $(GOBIN_DIR)/versitygw ] || { echo "go install $(VERSITYGW) (a few minutes, once)"; $(GO) install $(VERSITYGW); }
	@[ -x $(GOBIN_DIR)/nfpm ] || { echo "go install $(NFPM)"; $(GO) install $(NFPM); }
	@[ -x $(GOBIN_DIR)/nats-server ] || { echo "go install $(NATSSRV)"; $(GO) install $(NATSSRV); }

# make run reads dev.yaml, never the packaged /etc/ctxmem/ctxmemd.yaml.
run: deps-run build
	$(SUDO) ./$(BIN) run --config dev.yaml $(ARGS)

vet:
	$(GO) vet ./...
	$(GO) vet -tags soak,bench ./tests/...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

test: deps-test fmt-check vet
	PATH=$(GOBIN_DIR):$$PATH CTXMEM_REQUIRE_TOOLS=1 CTXMEM_E2E=1 $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	# The trace simulator is single-threaded and its replays are built only
	# without -race (heat/sim/replay_norace_test.go): run them plain.
	$(GO) test -count=1 -run 'Mooncake|^TestAdaptiveRobust$$|^TestDensityRobust$$' ./heat/sim/
	# Under -race TestPosix runs the default cache mode only: the others plain.
	CTXMEM_REQUIRE_TOOLS=1 $(GO) test -count=1 -run '^TestPosix$$' ./fusefs/
	# Every fuzz target briefly (the seeds already ran above as unit tests).
	GO=$(GO) bash tests/fuzz.sh 3s

fuzz:
	GO=$(GO) bash tests/fuzz.sh $(FUZZTIME)

# BENCH_ONLY=fio,nbd runs only those sections of tests/bench/run.sh (and
# skips the Go benchmarks below); QUICK=1 shortens them (see run.sh). The
# S3 benchmarks (./tiering/g4/s3) run in run.sh's s3 section only.
bench: deps-test build
	@if [ -z "$(BENCH_ONLY)" ]; then set -e; \
	  $(GO) test -run '^$$' -bench . -benchtime 2s $$($(GO) list ./heat/... ./tiering/... | grep -v '/tiering/g4/s3$$'); \
	  $(GO) test -count=1 -run 'TestMooncake|TestTwoTier' -v ./heat/sim/; \
	  $(GO) test -run '^$$' -bench . -benchtime 1s ./sidecar/msg/; \
	fi
	BENCH_ONLY=$(BENCH_ONLY) QUICK=$(QUICK) bash tests/bench/run.sh

# Crash soak (tests/soak): SOAK_CYCLES cycles (about 1-1.5 s each), or until
# SOAK_DURATION (a Go duration, e.g. 30m) if that comes first. SOAK_SEED
# replays a run's random choices; SOAK_PROFILES picks tier configurations
# (tiny,small,g4,roomy; also g3only, dram); a failure keeps its evidence in
# SOAK_KEEP (SOAK_SNAPSHOT=1: also the data dir before the failing start);
# SOAK_NBD=0: files only; SOAK_DISCARD=0: no NBD TRIM / hole-making WRITE_ZEROES.
SOAK_CYCLES   ?= 1000
SOAK_DURATION ?=
SOAK_SEED     ?=
SOAK_PROFILES ?=
SOAK_KEEP     ?= /var/tmp/ctxmem-soak
SOAK_SNAPSHOT ?=
SOAK_NBD      ?=
SOAK_DISCARD  ?=

soak: deps-run build
	$(SUDO) env PATH="$$PATH" CTXMEM_SOAK=1 CTXMEM_E2E_BIN=$(CURDIR)/$(BIN) CTXMEM_SOAK_CYCLES=$(SOAK_CYCLES) \
	  CTXMEM_SOAK_DURATION=$(SOAK_DURATION) CTXMEM_SOAK_SEED=$(SOAK_SEED) \
	  CTXMEM_SOAK_PROFILES=$(SOAK_PROFILES) CTXMEM_SOAK_KEEP=$(SOAK_KEEP) CTXMEM_SOAK_SNAPSHOT=$(SOAK_SNAPSHOT) \
	  CTXMEM_SOAK_NBD=$(SOAK_NBD) CTXMEM_SOAK_DISCARD=$(SOAK_DISCARD) \
	  $(GO) test -tags soak -count=1 -v -timeout 0 -run '^TestSoak$$' ./tests/soak/

# Package version: a release tag (v1.2.3[-N-gHASH]) loses its v; before the
# first tag git describe gives a bare hash, which becomes 0.0.0-git.<hash>.
PKG_VERSION := $(shell echo $(VERSION) | sed -E 's/^v?([0-9]+\.[0-9]+)/\1/; t; s/^/0.0.0-git./')

# Static PIE, stripped: lintian reports no errors on it.
pkg-bin:
	CGO_ENABLED=0 $(GO) build -buildmode=pie -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(BIN) ./cmd/ctxmemd

# The manual page: the hidden command `ctxmemd man` prints it (roff, from
# the CLI definition); written to a file first so a failure stops make.
man:
	mkdir -p build
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/ctxmemd man > build/ctxmemd.1
	gzip -9nf build/ctxmemd.1

# make deb rpm: packages in dist/ built with nfpm from packaging/.
deb rpm: pkg-bin man
	@[ -x $(GOBIN_DIR)/nfpm ] || $(GO) install $(NFPM)
	mkdir -p dist
	VERSION=$(PKG_VERSION) $(GOBIN_DIR)/nfpm package -f packaging/nfpm.yaml -p $@ -t dist/

clean:
	rm -rf bin dist build
