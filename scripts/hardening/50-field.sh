# scripts/hardening/50-field.sh — the field faults nodeprep used to name
# wrong (issue 32), each on its host tree: the exit code is the verdict
# (1: not ready, nothing written), where the old reading passed.
tree() { cp -a "testdata/hosts/$1/." "$HROOT/"; }

# nvidia-container-toolkit#1908: a spec nodeprep patched that lacks the
# driver's OpenGL/EGL core libraries (EGL falls back to Mesa silently).
tree missing-eglcore
"$NODEPREP" cdi patch --root "$HROOT" >/dev/null
spec=$HROOT/run/cdi/nvidia-container-toolkit.json
jq '.containerEdits.mounts |= map(select(.hostPath | test("/libnvidia-(eglcore|glcore|glsi|tls)\\.so\\.") | not))' "$spec" > "$spec.new" && mv "$spec.new" "$spec"
row "a patched spec without the EGL core libraries (toolkit#1908): cdi check" 1 -- "$NODEPREP" cdi check --root "$HROOT" --simulate dgx-h200

# NVIDIA/k8s-device-plugin#1182: only the Nix libc.so.6 in a folder the
# update-ldcache hook adds; the patch must refuse, not write.
fresh_work; tree ldcache-glibc-libc
row "libc.so.6 in an update-ldcache folder (device-plugin#1182): cdi patch" 1 -- "$NODEPREP" cdi patch --root "$HROOT"

# A nvidia-cdi handler under the containerd 1.7 plugin in k3s's version 3
# template (first boot): containerd 2.x ignores it.
fresh_work; tree fhs-ubuntu; tree k3s-containerd-v2-table-tmpl
row "a nvidia-cdi table under the v2 CRI plugin in config-v3.toml.tmpl: cdi check" 1 -- "$NODEPREP" cdi check --root "$HROOT"
