# nodeprep — build, test, demo, bench. `make test` installs what it needs.
GO        ?= go
BIN       := bin/nodeprep
# The lean child (probes, NVML) nodeprep runs when it sits beside it.
PROBE_BIN := bin/nodeprep-probe
# nodeprep with the cluster commands (Kubernetes API types): `nodeprep
# cluster` runs it from beside itself.
CLUSTER_BIN := bin/nodeprep-cluster
# The release: the tag of HEAD (with -N-gHASH past it, -dirty when modified);
# untagged, nodeprep says the version Go stamps from the commit.
VERSION   ?= $(shell git describe --tags --dirty 2>/dev/null)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS   := -X github.com/nodeprep/nodeprep/cmd/nodeprep/app.version=$(VERSION) \
             -X github.com/nodeprep/nodeprep/cmd/nodeprep/app.commit=$(COMMIT)
# Go tools are pinned in go.mod's tool block: nothing is installed by hand.
STATICCHECK := $(GO) tool staticcheck
# go-nvml's cgo preamble calls NVML functions NVIDIA marked deprecated; the
# first build would print a wall of those warnings, for that package only.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# Every step that can take minutes runs under scripts/heartbeat.sh, which
# prints "<label>: still running (N s)" every 30 s (HEARTBEAT_SECONDS) and,
# while Go is at work, the packages it compiles or tests: a cold run is
# never silent. What each step costs cold: docs/development.md.
HB        := ./scripts/heartbeat.sh
LVP_ICD    = $(firstword $(wildcard /usr/share/vulkan/icd.d/lvp_icd.*.json))
MESA_EGL  := /usr/share/glvnd/egl_vendor.d/50_mesa.json

# make install PREFIX=…: the three binaries side by side in PREFIX/bin, the man
# pages in PREFIX/share/man/man1, the shell completions (DESTDIR for packagers).
PREFIX    ?= /usr/local

.PHONY: all build install deps deps-demo deps-bench test vet lint unit rootfs tools nix-check docs-check demo bench faults hardening fuzz shaders clean

all: build

deps:
	@./scripts/install-deps.sh test

deps-demo:
	@./scripts/install-deps.sh demo

deps-bench:
	@./scripts/install-deps.sh bench

build:
	@GO=$(GO) ./scripts/first-build-note.sh "build: a first build downloads the modules and compiles every package, cgo ones (go-nvml, the CDI library) included: minutes (docs/development.md)" -trimpath
	CGO_ENABLED=1 $(HB) "build ($(BIN))" $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/nodeprep
	CGO_ENABLED=1 $(HB) "build ($(PROBE_BIN))" $(GO) build -trimpath -o $(PROBE_BIN) ./cmd/nodeprep-probe
	CGO_ENABLED=1 $(HB) "build ($(CLUSTER_BIN))" $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(CLUSTER_BIN) ./cmd/nodeprep-cluster

install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
	  $(DESTDIR)$(PREFIX)/share/zsh/site-functions \
	  $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	install -m 0755 $(BIN) $(PROBE_BIN) $(CLUSTER_BIN) $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 docs/man/man1/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	$(BIN) completion bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/nodeprep
	$(BIN) completion zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_nodeprep
	$(BIN) completion fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/nodeprep.fish
	@echo "installed nodeprep in $(DESTDIR)$(PREFIX)/bin (man nodeprep: MANPATH=$(DESTDIR)$(PREFIX)/share/man where that is not on the search path)"

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(HB) "vet (go vet)" $(GO) vet ./...

lint: vet
	@echo "lint: staticcheck (pinned in go.mod; the first run builds it)"
	$(HB) "lint (staticcheck)" $(STATICCHECK) ./...

# Real components: Mesa's lavapipe and Mesa EGL stand in for the NVIDIA driver.
# The tests run with a private TMPDIR and fail when they leave anything in it;
# the pod-path matrix (nodeprep/podpath) runs 27 pods, so a package may take
# more than go test's default 10 minutes on a loaded machine.
unit:
	@echo "unit: go test ./... with lavapipe and Mesa EGL"
	@GO=$(GO) ./scripts/first-build-note.sh "unit: a first run compiles every package and its tests before they run: minutes (docs/development.md)"
	VK_DRIVER_FILES=$(LVP_ICD) __EGL_VENDOR_LIBRARY_FILENAMES=$(MESA_EGL) \
	  NODEPREP_TEST_ROOTFS=$(CURDIR)/.cache/rootfs \
	  $(HB) "unit (go test)" ./scripts/tmpdir-check.sh $(GO) test -count=1 -timeout 30m ./...

# The in-container self-test's root file system (Debian packages, no driver).
rootfs:
	@echo "rootfs: the in-container self-test's image from Debian packages (.cache/rootfs)"
	$(HB) rootfs ./scripts/make-test-rootfs.sh .cache/rootfs

# The real upstream components the tests run (NVIDIA container toolkit,
# containerd, crictl), built from their pinned tools modules under
# testdata/tools/ into .cache/tools/ (a warm run builds nothing). The
# script runs each component's build under heartbeat.sh itself, with the
# component in the label.
tools:
	@./scripts/build-tools.sh >/dev/null

nix-check:
	./scripts/nix-check.sh
	./scripts/vendor-hash.sh --check

docs-check:
	./scripts/docs-check.sh

# deps, then scripts/test.sh: tools in the background while build, lint and
# rootfs run, then unit, nix-check and docs-check (why in that order: the
# script's head).
test: deps
	@GO=$(GO) ./scripts/test.sh

demo: deps-demo build
	$(HB) demo ./scripts/demo.sh

bench: deps-bench build
	./scripts/bench.sh

fuzz:
	./scripts/fuzz.sh

# The fault table: nodeprep against fake drivers (hang, abort, segfault,
# 1 GiB on stderr, a daemon, a complaint), written into docs/faults.md.
faults: build
	VK_DRIVER_FILES=$(LVP_ICD) __EGL_VENDOR_LIBRARY_FILENAMES=$(MESA_EGL) \
	  ./scripts/faults.sh --update docs/faults.md

shaders:
	$(MAKE) -C nodeprep/selftest shaders

clean:
	rm -rf bin

# Hostile inputs (redirects, YAML bombs, swapped directories, floods),
# measured into docs/faults.md's hardening table.
hardening: build
	./scripts/hardening.sh --update docs/faults.md
