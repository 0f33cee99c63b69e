# cachecast: build, run, test, bench, fuzz, install.
GO        ?= go
BIN       := bin
PREFIX    ?= /usr/local
DESTDIR   ?=
UNITDIR   ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
SYSCONFDIR  ?= /etc
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The version of both binaries: daemon.Version for cachecastd, main.version
# for cachecast (cachecast version prints both).
LDFLAGS   := -X github.com/cachecast/cachecast/daemon.Version=$(VERSION) -X main.version=$(VERSION)
FUZZTIME  ?= 5s
FUZZJOBS  ?= 2

.PHONY: all build deb dist run test vet race scale fuzz python bench bench-accumulate bench-daemon bench-fleet bench-gc bench-memory bench-redis bench-satellite bench-status bench-time install clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

# A single node with the embedded defaults: data in ./data, socket ./cachecast.sock,
# shared view ./cachecast.view.
run: build
	./$(BIN)/cachecastd

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }

# Every test under the race detector but the scale tests (TestScale*),
# which run in make scale. The two longest packages, the end-to-end tests
# and the daemon's, come first: go test starts the packages in the order
# given, -p (the cores) at a time, so the short ones fill in beside them
# instead of leaving the longest alone at the end.
RACE_FIRST = ./test/ ./daemon/
race:
	$(GO) test -race -timeout 30m -skip '^TestScale' $(RACE_FIRST) ./...

# The scale tests (TestScale*: fleets of 12 to 25 nodes, tens of thousands
# of keys) without the race detector, which slows them five to ten times
# and finds nothing in them that the smaller tests of the same code, run
# under it, do not (see docs/testing.md).
SCALE_PKGS = $$(grep -rl --include='*_test.go' '^func TestScale' . | xargs -n1 dirname | sort -u)
scale:
	$(GO) test -count=1 -timeout 15m -run '^TestScale' $(SCALE_PKGS)

# A short pass of every fuzz target, FUZZJOBS at a time (see test/run-fuzz.sh).
fuzz:
	FUZZTIME=$(FUZZTIME) FUZZJOBS=$(FUZZJOBS) GO=$(GO) bash test/run-fuzz.sh

# The Python reader of the shared view (standard library only).
python:
	cd localview/python && python3 -m unittest -v

test: vet race scale fuzz python

bench:
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m ./store/

# cachecast bench against a local daemon beside redis-benchmark against a
# local redis-server, both over Unix sockets (not in CI).
bench-daemon:
	bash test/bench-vs-redis.sh

# Only the Redis section of bench-daemon: redis-benchmark -t get,set,mget on
# cachecastd's Redis socket and redis-server's, in turn, ROUNDS rounds (not in CI).
bench-redis:
	REDIS_ONLY=1 N=$${N:-100000} ROUNDS=$${ROUNDS:-2} bash test/bench-vs-redis.sh

# Resident memory of cachecastd and redis-server holding N keys (default
# 1,000,000; N=10000000 for 10M) loaded through their Redis sockets, one
# after the other, idle and loaded, with the ratios (test/bench-memory.sh;
# not in CI, minutes).
bench-memory:
	bash test/bench-memory.sh

# The Go collector under pipelined SETs at 1M keys: collections a million
# SETs, live heap and goal, daemon CPU a SET (test/bench-gc.sh; not in CI,
# minutes; BINS, GOGCS and ROUNDS compare builds and GOGC values).
bench-gc:
	bash test/bench-gc.sh

# What GET /v1/status costs a node of 300,000 keys and what loops of it do to
# a writer's SET latency (test/bench-status.sh; not in CI, minutes);
# BINS="dir1 dir2" sets builds side by side.
bench-status:
	bash test/bench-status.sh

# The publish rate with expiry and schedules against without, through the
# Redis door and HTTP (test/bench-time.sh; not in CI, minutes).
bench-time:
	bash test/bench-time.sh

# The fleet harness (internal/fleet; not in CI, minutes, niced): in-process
# fleets of 10 to 200 nodes over TCP and NATS, cachecastd process fleets, and
# a fresh node's bootstrap from 1M and 10M keys. Merges its figures into
# docs/fleet.json under -label, draws docs/fleet.png and prints the tables of
# BENCHMARKS.md. Flags through FLEET_ARGS, e.g. FLEET_ARGS='-label after -nodes 10,25'.
bench-fleet:
	nice -n 10 $(GO) run ./internal/fleet/benchfleet $(FLEET_ARGS)

# The store beside SkyWalking Satellite's mmap queue, alternated in one run on
# the disk and on a tmpfs, three rounds, as a ratio table (not in CI). Needs a
# local copy of Satellite's repository, outside this module:
#   make bench-satellite SATELLITE_DIR=/path/to/skywalking-satellite
bench-satellite:
	SATELLITE_DIR="$(SATELLITE_DIR)" GO=$(GO) bash test/bench-satellite.sh

# Appends 20 GB and reports the rate per GB: a flat line is the goal (not in CI).
bench-accumulate:
	CACHECAST_ACCUMULATE_GB=20 $(GO) test -run '^$$' -bench 'BenchmarkAccumulate' -benchtime 1x -timeout 60m ./store/

# Binaries, the systemd unit (its ExecStart follows PREFIX), the sysusers and
# tmpfiles snippets, and the settings file (an example; an existing one is kept).
install: build
	install -D -m 0755 $(BIN)/cachecastd $(DESTDIR)$(PREFIX)/bin/cachecastd
	install -D -m 0755 $(BIN)/cachecast $(DESTDIR)$(PREFIX)/bin/cachecast
	install -d $(DESTDIR)$(UNITDIR)
	sed 's|/usr/local/bin/|$(PREFIX)/bin/|g' systemd/cachecastd.service > $(DESTDIR)$(UNITDIR)/cachecastd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/cachecastd.service
	install -D -m 0644 systemd/cachecast.sysusers $(DESTDIR)$(SYSUSERSDIR)/cachecast.conf
	install -D -m 0644 systemd/cachecast.tmpfiles $(DESTDIR)$(TMPFILESDIR)/cachecast.conf
	install -D -m 0644 systemd/cachecastd.env.example $(DESTDIR)$(PREFIX)/share/doc/cachecast/cachecastd.env.example
	test -e $(DESTDIR)$(SYSCONFDIR)/default/cachecastd || \
		install -D -m 0640 systemd/cachecastd.env.example $(DESTDIR)$(SYSCONFDIR)/default/cachecastd

# Static binaries for one GOOS/GOARCH, $(BIN)/linux-<arch>/: no cgo,
# stripped, statically linked (what the package and dist ship).
STATIC = CGO_ENABLED=0 GOOS=linux GOARCH=$(1) $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/linux-$(1)/ ./cmd/...
DEB_ARCH ?= $(shell $(GO) env GOARCH)

# The Debian package $(BIN)/cachecast_<version>_<arch>.deb (internal/mkdeb,
# nfpm): static binaries, the unit, sysusers and tmpfiles files, the
# settings file as a conffile, manual pages and completions the binaries
# print (so DEB_ARCH must run here), maintainer scripts from packaging/deb.
# The version is git describe's, made a Debian version.
deb:
	$(call STATIC,$(DEB_ARCH))
	rm -rf $(BIN)/deb && mkdir -p $(BIN)/deb
	$(BIN)/linux-$(DEB_ARCH)/cachecastd --man > $(BIN)/deb/cachecastd.8
	$(BIN)/linux-$(DEB_ARCH)/cachecast --man > $(BIN)/deb/cachecast.1
	for sh in bash zsh fish; do $(BIN)/linux-$(DEB_ARCH)/cachecast completion $$sh > $(BIN)/deb/cachecast.$$sh || exit 1; done
	$(GO) run ./internal/mkdeb -describe "$(VERSION)" -arch $(DEB_ARCH) -bin $(BIN)/linux-$(DEB_ARCH) \
		-gen $(BIN)/deb -out $(BIN) -mtime "$$(git log -1 --format=%ct 2>/dev/null || echo 0)"

# Static binaries for linux/amd64 and linux/arm64 with their SHA-256 sums:
# $(BIN)/dist/cachecast{,d}-<version>-linux-<arch> and $(BIN)/dist/SHA256SUMS.
dist:
	rm -rf $(BIN)/dist && mkdir -p $(BIN)/dist
	for arch in amd64 arm64; do \
		$(call STATIC,$$arch) || exit 1; \
		for b in cachecastd cachecast; do cp $(BIN)/linux-$$arch/$$b $(BIN)/dist/$$b-$(VERSION)-linux-$$arch; done; \
	done
	cd $(BIN)/dist && sha256sum cachecast* > SHA256SUMS && cat SHA256SUMS

clean:
	rm -rf $(BIN)
