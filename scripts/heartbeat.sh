#!/usr/bin/env bash
# heartbeat.sh LABEL COMMAND [ARG...] — runs COMMAND and, every
# HEARTBEAT_SECONDS (default 30; 0 turns it off) while it runs, prints
#
#   LABEL: still running (N s)
#
# on stderr, so a long step (a cold component build, go vet, go test, apt)
# is never a silent stretch. When Go is at work under COMMAND the line says
# on what: the test binaries running ("testing nodeprep/podpath", by
# package directory), the packages compiling ("compiling k8s.io/api/...")
# and whether it links. That is read from /proc, so COMMAND's own output
# (go test's included) is left exactly as it is.
#
# COMMAND keeps this script's stdin, stdout and stderr, and its exit status
# is this script's. The heartbeat stops the moment COMMAND exits and leaves
# no process behind; SIGINT (Ctrl-C), SIGTERM or SIGHUP to this script is
# passed on to COMMAND, waited for, and then ends this script the same way.
set -u
[ $# -ge 2 ] || { echo "usage: $0 LABEL COMMAND [ARG...]" >&2; exit 2; }
label=$1; shift
every=${HEARTBEAT_SECONDS:-30}
[[ $every =~ ^[0-9]+$ ]] || { echo "heartbeat: HEARTBEAT_SECONDS=$every is not a whole number of seconds" >&2; exit 2; }
every=$((10#$every))
((every > 0)) || exec "$@"

# doing PID: what Go does below PID, read from /proc ("" when nothing).
doing() {
  local root=$1 f line pid ppid p i n word testing=() compiling=() linking=0
  local -A kids=()
  for f in /proc/[0-9]*/stat; do
    { read -r line <"$f"; } 2>/dev/null || continue
    pid=${line%% *}
    # After the command name, which may hold spaces and ')': state, ppid.
    ppid=${line##*) }; ppid=${ppid#* }; ppid=${ppid%% *}
    kids[$ppid]+=" $pid"
  done
  local queue=("$root") all=()
  while ((${#queue[@]})); do
    p=${queue[0]}; queue=("${queue[@]:1}")
    for i in ${kids[$p]:-}; do all+=("$i"); queue+=("$i"); done
  done
  for p in "${all[@]}"; do
    local argv=()
    { mapfile -d '' -t argv <"/proc/$p/cmdline"; } 2>/dev/null || continue
    ((${#argv[@]})) || continue
    case ${argv[0]##*/} in
      *.test)
        word=$(readlink "/proc/$p/cwd" 2>/dev/null) || continue
        [ "$word" = "$here" ] && word=. || word=${word#"$here"/}
        testing+=("$word") ;;
      compile | cgo)
        for ((i = 1; i < ${#argv[@]} - 1; i++)); do
          case ${argv[i]} in -p | -importpath) compiling+=("${argv[i + 1]}"); break ;; esac
        done ;;
      link) linking=1 ;;
    esac
  done
  list() { # at most 3 names, then how many more
    local out
    out=$(printf '%s\n' "$@" | sort -u | head -3 | paste -sd, | sed 's/,/, /g')
    n=$(printf '%s\n' "$@" | sort -u | wc -l)
    ((n > 3)) && out+=" and $((n - 3)) more"
    printf '%s' "$out"
  }
  local say=()
  ((${#testing[@]})) && say+=("testing $(list "${testing[@]}")")
  ((${#compiling[@]})) && say+=("compiling $(list "${compiling[@]}")")
  ((linking)) && say+=("linking")
  ((${#say[@]})) && printf ': %s' "$(printf '%s; ' "${say[@]}" | sed 's/; $//')"
  return 0
}

stop_ticker() {
  [ -n "$ticker" ] || return 0
  kill -TERM "$ticker" 2>/dev/null
  wait "$ticker" 2>/dev/null
}
on_signal() {
  [ -z "$cmd" ] || kill "-$1" "$cmd" 2>/dev/null
  # The ticker first: when the signal that brought us here also ended
  # COMMAND (Ctrl-C reaches the whole process group), bash can lose
  # COMMAND's exit status in the interrupted wait, and a wait for it would
  # then last as long as another child, the ticker, does.
  stop_ticker
  [ -z "$cmd" ] || wait "$cmd" 2>/dev/null
  trap - "$1"
  kill "-$1" $$
  exit 1 # not reached: the signal ends this script
}
here=$(pwd -P) # test binaries are named by their directory below here
# Set before the children start (subshells reset them to the defaults).
cmd= ticker=
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'on_signal HUP' HUP
SECONDS=0
# The command runs in the background so that a signal to this script is
# handled at once (bash runs traps only between commands, or during
# `wait`). A background command of a non-interactive shell would ignore
# SIGINT and read /dev/null: the subshell restores both, so Ctrl-C still
# reaches it as it would in the foreground.
(trap - INT QUIT; exec "$@") <&0 &
cmd=$!
# The ticker sleeps in a child of its own and kills it when told to stop,
# so no `sleep` outlives it. It writes each line from a subshell: bash 5.2
# can fail to parse a command substitution (and so never runs the trap)
# when a trapped signal comes while it expands one, so neither the ticker
# nor this shell, once their traps are set, expands any. Its stdout is
# stderr, so a caller reading COMMAND's stdout to its end does not wait on
# the ticker.
(
  trap 'kill %% 2>/dev/null; wait; exit 0' TERM
  while :; do
    sleep $((every - SECONDS % every)) &
    wait $!
    (echo "$label: still running ($SECONDS s)$(doing "$cmd")")
  done
) >&2 &
ticker=$!

wait "$cmd"
rc=$?
stop_ticker
exit "$rc"
