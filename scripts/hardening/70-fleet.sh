# scripts/hardening/70-fleet.sh — `cluster check-node` on hostile facts
# (issue 31): malformed facts exit 65, the store is read and never
# written, and the throw-away tree (under $WORK/tmp, which counts as
# outside the root) is removed on every exit.
mkdir -p "$WORK/tmp"
good=testdata/fleet/generated/facts.json
pkg=/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-hostile
kubelet=/nix/store/0a1b2c3d4e5f6g7h8j9k0l1m2n3p4q5r-k3s-kubelet-config
mkdir -p "$HROOT/store$pkg/lib" "$HROOT/store/nix/store"
truncate -s 10G "$HROOT/store$pkg/lib/libbig.so"
printf 'store\n' > "$HROOT/store$kubelet"
cn=(env TMPDIR="$WORK/tmp" "$NODEPREP_CLUSTER" cluster check-node
  --store-root "$HROOT/store" --store-root testdata/fleet/store
  --store-root testdata/hosts/nixos-h200 --store-root testdata/hosts/nvruntime-nixos-117)
facts() { jq "$1" "$good" > "$HROOT/$2"; }

facts '.k3s.args += ["--kubelet-arg=config=/var/run"]' varrun.json
row "check-node: a kubelet config file over the tree's /var/run link" 65 -- "${cn[@]}" --facts "$HROOT/varrun.json"
facts '.driver.package = "/dev/zero"' devzero.json
row "check-node: driver package /dev/zero (not a store path)" 65 -- "${cn[@]}" --facts "$HROOT/devzero.json"
facts '.k3s.version = "latest; rm -rf /"' version.json
row "check-node: a k3s version that is not a version" 65 -- "${cn[@]}" --facts "$HROOT/version.json"
jq -c . "$good" | sed 's/}$/,"name":"other"}/' > "$HROOT/dup.json"
row "check-node: facts with a key twice" 65 -- "${cn[@]}" --facts "$HROOT/dup.json"
jq -c . "$good" | sed 's/"gpu-01"/"gpu-\xff"/' > "$HROOT/latin1.json"
row "check-node: facts that are not UTF-8" 65 -- "${cn[@]}" --facts "$HROOT/latin1.json"
facts ".driver.package = \"$pkg\"" sparse.json
row "check-node: a 10 GiB sparse file in the driver package" 65 -- "${cn[@]}" --facts "$HROOT/sparse.json"
facts '.k3s.dropIns = {"../../../../tmp/x": "a"}' dropin.json
row "check-node: a drop-in named ../../../../tmp/x" 65 -- "${cn[@]}" --facts "$HROOT/dropin.json"
# The facts write the kubelet config at a store path the store also has
# (and nodeprep's config names): the store's file is left as it was.
row "check-node: the store's copy of a file the facts write is not overwritten" 0 -- \
  sh -c '"$@" >/dev/null; rc=$?; [ "$(cat "$0")" = store ] || exit 99; exit $rc' "$HROOT/store$kubelet" "${cn[@]}" --facts "$good"
# The config file of the machine the check runs on is not read.
mkdir -p "$HROOT/etc/nodeprep"; printf 'cdi: [not, a, map\n' > "$HROOT/etc/nodeprep/config.yaml"
row "check-node: a malformed config file on the machine it runs on (--root)" 0 -- "${cn[@]}" --root "$HROOT" --facts "$good"
facts '.driver.package = "/nix/store/zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz-nvidia-x11-0.0.0"' absent.json
row "check-node: a driver package in no store here" 69 -- "${cn[@]}" --facts "$HROOT/absent.json"
facts '.k3s.unitPath = [range(5000) | "/nix/store/\(. | tostring | ("0" * (32 - length)) + .)-p/bin"]' unitpath.json
row "check-node: a k3s unit PATH of 5000 directories" 65 -- "${cn[@]}" --facts "$HROOT/unitpath.json"
