#!/usr/bin/env bash
# Start-up (docs/faults.md, "Start-up"): `nodeprep version` against
# hello-world Go programs, as whole processes, alternating (hyperfine -N,
# medians):
#   - hello world without cgo, and with cgo (nodeprep is a cgo program: it
#     links libc and libdl to dlopen NVML, Vulkan and EGL);
#   - hello world linking only the libraries nodeprep must use (cobra,
#     yaml.v3, BurntSushi/toml, apimachinery validation, the CDI library),
#     without and with cgo: the floor for any nodeprep built on them;
#   - nodeprep-cluster version (nodeprep with the Kubernetes API types).
# Also GODEBUG=inittrace=1 of each nodeprep binary: package inits, clock.
# Build first (`make build`); RUNS sets the count.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-40}
out=${BENCH_OUT:-.bench}
mkdir -p "$out"
for b in bin/nodeprep bin/nodeprep-cluster bin/nodeprep-probe; do
  [ -x "$b" ] || { echo "bench-startup: $b not built (make build)" >&2; exit 1; }
done
command -v hyperfine >/dev/null && command -v jq >/dev/null || { echo "bench-startup: hyperfine and jq needed (make deps-bench)" >&2; exit 1; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

# The hello worlds, built in this module (so with its pinned versions).
mkdir -p "$work/hello" "$work/hellocgo" "$work/libs"
cat >"$work/hello/main.go" <<'EOG'
package main

import "fmt"

func main() { fmt.Println("hello") }
EOG
cat >"$work/hellocgo/main.go" <<'EOG'
package main

// int one(void) { return 1; }
import "C"
import "fmt"

func main() { fmt.Println("hello", C.one()) }
EOG
cat >"$work/libs/main.go" <<'EOG'
package main

import (
	"fmt"

	_ "github.com/BurntSushi/toml"
	_ "github.com/spf13/cobra"
	_ "go.yaml.in/yaml/v3"
	_ "k8s.io/apimachinery/pkg/util/validation"
	_ "tags.cncf.io/container-device-interface/pkg/cdi"
)

func main() { fmt.Println("hello") }
EOG
# Built from a copy of go.mod/go.sum so the repository is not touched.
mkdir -p "$work/mod"
cp go.mod go.sum "$work/mod/"
mv "$work/hello" "$work/hellocgo" "$work/libs" "$work/mod/"
(cd "$work/mod" &&
  CGO_ENABLED=0 go build -trimpath -o "$work/hello-go" ./hello &&
  CGO_ENABLED=1 go build -trimpath -o "$work/hello-cgo" ./hellocgo &&
  CGO_ENABLED=0 go build -trimpath -o "$work/libs-go" ./libs &&
  CGO_ENABLED=1 go build -trimpath -o "$work/libs-cgo" ./libs)

for b in bin/nodeprep bin/nodeprep-cluster bin/nodeprep-probe; do
  { GODEBUG=inittrace=1 "$b" version 2>&1 >/dev/null || true; } | awk -v b="$(basename "$b")" -v size="$(stat -c %s "$b")" '/^init / {n++; ms+=$5}
    END {printf "%-17s %5.1f MB, %3d package inits, %.2f ms init clock\n", b, size / 1e6, n, ms}'
done
rm -f "$out"/startup-round-*.json
for i in $(seq $(( (runs + 4) / 5 ))); do
  hyperfine -N --warmup 3 --runs 5 --export-json "$out/startup-round-$i.json" \
    -n "nodeprep version" "bin/nodeprep version" \
    -n "nodeprep-cluster version" "bin/nodeprep-cluster version" \
    -n "hello world" "$work/hello-go" \
    -n "hello world, cgo" "$work/hello-cgo" \
    -n "hello world + required libraries" "$work/libs-go" \
    -n "hello world + required libraries, cgo" "$work/libs-cgo" >/dev/null 2>&1
done
jq -s '[.[].results] | transpose | map({command: .[0].command, times: (map(.times) | add)})' "$out"/startup-round-*.json >"$out/startup.json"
jq -r '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def ms: . * 1000 * 100 | round / 100;
  (map({key: .command, value: (.times | median)}) | from_entries) as $m |
  "medians over \(.[0].times | length) alternating runs each:",
  (.[] | "  \(.command): \(.times | median | ms) ms"),
  "nodeprep version / hello world:       \($m["nodeprep version"] / $m["hello world"] * 100 | round / 100)x (target <= 1.5x)",
  "nodeprep version / hello world, cgo:  \($m["nodeprep version"] / $m["hello world, cgo"] * 100 | round / 100)x",
  "floor, the required libraries alone:  \($m["hello world + required libraries"] / $m["hello world"] * 100 | round / 100)x without cgo, \($m["hello world + required libraries, cgo"] / $m["hello world, cgo"] * 100 | round / 100)x with"' "$out/startup.json"
