# scripts/hardening/55-runtime.sh — the runtime handler's program read as a
# wrapper script (issue 29): a handler's BinaryName that is the GPU
# Operator's wrapper is read for the config file it points the runtime at.
# nodeprep reads at most 64 KiB of it (nvruntime.MaxWrapper), never a
# FIFO, and says when it cannot tell; each row runs under a 2 GiB
# address-space cap, like 20-yaml.sh's.
CAPPED=(bash -c 'ulimit -v 2097152; exec "$@"' capped)

# fhs-ubuntu with nvruntime-operator-wrapper laid over it, as the tests do:
# the nvidia handler's BinaryName is /usr/local/nvidia/toolkit/nvidia-container-runtime.
NV=$HROOT/nv
mkdir -p "$NV"
cp -a testdata/hosts/fhs-ubuntu/. "$NV/"
cp -a testdata/hosts/nvruntime-operator-wrapper/. "$NV/"
WRAP=$NV/usr/local/nvidia/toolkit/nvidia-container-runtime

printf '#!/bin/sh\n' >"$WRAP"
truncate -s 200M "$WRAP"
row "runtime wrapper script of 200 MB (sparse): \`cdi check\` (a nvidia-runtime-wrapper finding)" 1 -- "${CAPPED[@]}" "$NODEPREP" --root "$NV" cdi check --simulate dgx-h200
python3 -c 'import sys; sys.stdout.write("#!/bin/sh\nXDG_CONFIG_HOME=" + "x" * (50 << 20) + " exec /r\n")' >"$WRAP"
row "runtime wrapper script of one 50 MB line: \`cdi check\`" 1 -- "${CAPPED[@]}" "$NODEPREP" --root "$NV" cdi check --simulate dgx-h200
rm -f "$WRAP"
mkfifo "$WRAP"
row "runtime wrapper that is a FIFO no one writes: \`cdi check\`" 1 -- "${CAPPED[@]}" "$NODEPREP" --root "$NV" cdi check --simulate dgx-h200
rm -f "$WRAP"
