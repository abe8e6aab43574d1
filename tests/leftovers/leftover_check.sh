#!/usr/bin/env bash
# What deepbox's tests could leave behind on this host, and a check that they
# left none of it (issue 29, item 13). CTest runs `snapshot` before every test
# and `check` after all of them (the fixture deepbox_host_clean, see
# tests/leftovers/CMakeLists.txt and cmake/Helpers.cmake):
#   leftover_check.sh snapshot FILE   records what is there now
#   leftover_check.sh check FILE      fails, naming each, if anything not in
#                                     FILE is still there after a grace period
#                                     (LEFTOVER_GRACE seconds, default 30: a
#                                     supervisor ending its sandbox takes a moment)
#   leftover_check.sh list            prints what is there now
# Counted: deepbox supervisor (`deepbox __supervise`), pool daemon and
# sandboxd processes; loop devices backed by a sandbox's workspace image;
# mounts of a sandbox's workspace (or any mount point naming deepbox); cgroups
# under a `deepbox` cgroup dir (every sandbox's: <cgroup>/deepbox/<id>).
set -uo pipefail

list() {
  local d cmd rest start
  for d in /proc/[0-9]*; do
    cmd=$( { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null) || continue
    case "$cmd" in
      *"deepbox __supervise"* | *"deepbox pool serve"* | *deepbox-sandboxd* | /.deepbox/sandboxd*) ;;
      *) continue ;;
    esac
    # /proc/PID/stat after the command name: state is field 1, start time field 20.
    rest=$(sed 's/^.*) //' "$d/stat" 2>/dev/null) || continue
    set -- $rest
    [[ ${1:-Z} == Z ]] && continue  # a zombie is gone, only not yet reaped
    start=${20:-0}
    echo "process ${d#/proc/} (start time $start): ${cmd:0:160}"
  done
  local f back
  for f in /sys/block/loop*/loop/backing_file; do
    [[ -r $f ]] || continue
    back=$(cat "$f" 2>/dev/null)
    case "$back" in
      */sandboxes/*/workspace.img* | *deepbox*) echo "loop device $(basename "$(dirname "$(dirname "$f")")") backed by $back" ;;
    esac
  done
  awk '$5 ~ /\/sandboxes\/[^\/]+\/workspace$/ || $5 ~ /deepbox/ { print "mount " $5 }' /proc/self/mountinfo
  find /sys/fs/cgroup -mindepth 2 -maxdepth 10 -type d -path '*/deepbox/*' -prune 2>/dev/null |
    sed 's/^/cgroup /'
}

new_since() {  # lines of `list` not in the snapshot $1
  if [[ -r $1 ]]; then
    list | sort | comm -23 - <(sort "$1")
  else
    list | sort
  fi
}

case "${1:-}" in
  list) list ;;
  snapshot)
    [[ -n ${2:-} ]] || { echo "usage: $0 snapshot FILE" >&2; exit 2; }
    list | sort >"$2"
    echo "leftover check: $(wc -l <"$2") pre-existing item(s) recorded in $2"
    ;;
  check)
    [[ -n ${2:-} ]] || { echo "usage: $0 check FILE" >&2; exit 2; }
    grace=${LEFTOVER_GRACE:-30}
    deadline=$((SECONDS + grace))
    while :; do
      left=$(new_since "$2")
      [[ -z $left ]] && { echo "leftover check: the tests left nothing behind"; exit 0; }
      ((SECONDS >= deadline)) && break
      sleep 1
    done
    echo "leftover check: the tests left these behind (still there after ${grace} s):" >&2
    echo "$left" >&2
    exit 1
    ;;
  *)
    echo "usage: $0 snapshot FILE | check FILE | list" >&2
    exit 2
    ;;
esac
