# 80-misc.sh — the smaller kinds of issue 32's item 10 that the other case
# files do not cover: an env file with an unterminated quote, a kubeconfig
# whose exec plugin would write outside the root, and inotify out of
# instances.

cp -a testdata/hosts/nixos-h200/. "$HROOT"/
mkdir -p "$HROOT/etc"

# systemd's env-file reader (src/basic/env-file.c) takes the rest of the
# file as the value of an unterminated quote: the K3S_CONFIG_FILE after it
# is never set, so its taint must not be read. The wrapper exits 99 when
# it is.
printf 'K3S_DATA_DIR="/var/lib/other\nK3S_CONFIG_FILE=/etc/evil.yaml\n' >"$HROOT/etc/k3s.env"
printf 'node-taint:\n- evil=yes:NoSchedule\n' >"$HROOT/etc/evil.yaml"
row "join --k3s-env-file: an unterminated quote takes the rest of the file, as systemd reads it (the K3S_CONFIG_FILE after it is not set; exit 99: its taint was read)" 0 -- \
  sh -c 'out=$("$0" join --simulate dgx-h200 --root "$1" --k3s-env-file /etc/k3s.env --dry-run 2>&1); rc=$?; case $out in *evil=yes*) exit 99 ;; esac; exit $rc' "$NODEPREP" "$HROOT"

# An exec credential plugin is never run: if it were, it would write
# $WORK/outside/ran (a file outside the root) and print the secret.
cat >"$WORK/exec.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user:
    tokenFile: /etc/shadow
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: /bin/sh
      args: ["-c", "touch $WORK/outside/ran; echo $SECRET"]
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
KC
row "cluster check --kubeconfig: a kubeconfig with an exec plugin and tokenFile (warned about, never run or read; no server: exit 69)" 69 -- \
  "$NODEPREP_CLUSTER" cluster check --pool-label nodeprep.dev/pool=gpu --kubeconfig "$WORK/exec.kubeconfig"

# inotify out of instances: the limit lowered to 0 in a user namespace of
# the row's own (user.max_inotify_instances), so the host's is untouched.
row "cdi watch with inotify out of instances (user namespace limit 0): the limit, its sysctl and the fix named" 69 -- \
  unshare -U -r sh -c 'echo 0 >/proc/sys/user/max_inotify_instances && exec "$0" cdi watch --root "$1"' "$NODEPREP" "$HROOT"
