#!/usr/bin/env bash
# first-build-note.sh NOTE [GO BUILD FLAGS...]: print NOTE when this build
# is a first one, that is when Go's build cache lacks go-nvml's cgo package
# built with these flags and the environment's CGO_CFLAGS (a sign of a cold
# cache: go-nvml and the CDI library compile with cgo). `make build` and
# `make unit` say then that it takes minutes, pointing to
# docs/development.md for what each step costs (the numbers live there
# only); a warm build says nothing. GO names the go command (default go).
set -uo pipefail
note=$1; shift
stale=$("${GO:-go}" list "$@" -f '{{.Stale}}' github.com/NVIDIA/go-nvml/pkg/nvml 2>/dev/null)
[ "$stale" = false ] || echo "$note"
exit 0
