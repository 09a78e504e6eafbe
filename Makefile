# nodeprep — build, test, demo, bench. `make test` installs what it needs.
GO        ?= go
BIN       := bin/nodeprep
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS   := -X github.com/nodeprep/nodeprep/cmd/nodeprep/app.version=$(VERSION) \
             -X github.com/nodeprep/nodeprep/cmd/nodeprep/app.commit=$(COMMIT)
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck
LVP_ICD   := $(firstword $(wildcard /usr/share/vulkan/icd.d/lvp_icd.*.json))
MESA_EGL  := /usr/share/glvnd/egl_vendor.d/50_mesa.json

.PHONY: all build deps test vet lint unit rootfs nix-check demo bench fuzz shaders clean

all: build

deps:
	./scripts/install-deps.sh

build:
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/nodeprep

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...

lint: vet
	$(STATICCHECK) ./...

# Real components: Mesa's lavapipe and Mesa EGL stand in for the NVIDIA driver.
unit:
	VK_DRIVER_FILES=$(LVP_ICD) __EGL_VENDOR_LIBRARY_FILENAMES=$(MESA_EGL) \
	  NODEPREP_TEST_ROOTFS=$(CURDIR)/.cache/rootfs \
	  $(GO) test -count=1 ./...

# The in-container self-test's root file system (Debian packages, no driver).
rootfs:
	./scripts/make-test-rootfs.sh .cache/rootfs

nix-check:
	./scripts/nix-check.sh

test: deps build lint rootfs unit nix-check

demo: deps build
	./scripts/demo.sh

bench: deps build
	./scripts/bench.sh

fuzz:
	./scripts/fuzz.sh

shaders:
	$(MAKE) -C nodeprep/selftest shaders

clean:
	rm -rf bin
