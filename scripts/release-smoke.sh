#!/usr/bin/env bash
# The release binaries at work, not only their hardening flags: they are what
# README's main example runs, and they are linked differently from the dev
# build the test suite runs (the C++ runtime, Boost.JSON and fmt linked in;
# libarchive, dlopen()ed on first use, then brings a shared libstdc++ beside
# it through ICU).
#   scripts/release-smoke.sh RELEASE_BUILD_DIR [DEV_BUILD_DIR]
# 1. the example (the recorded conversation: no API key needed) on a local
#    sandbox of the release `deepbox` and `deepbox-sandboxd`;
# 2. `deepbox sandbox create`, `cp` a tree in and out (libarchive in the CLI
#    and in the daemon), `exec`, `rm`, compared byte for byte;
# 3. with DEV_BUILD_DIR: the daemon's integration tests against the release
#    daemon (DEEPBOX_SANDBOXD_BIN).
set -euo pipefail
release=${1:?usage: scripts/release-smoke.sh RELEASE_BUILD_DIR [DEV_BUILD_DIR]}
dev=${2:-}
release=$(cd "$release" && pwd)
bin=$release/bin
for f in deepbox deepbox-sandboxd deepbox-fib-example; do
  [[ -x $bin/$f ]] || { echo "release-smoke: $bin/$f is missing: build the release first" >&2; exit 2; }
done

work=$(mktemp -d /tmp/deepbox-release-smoke.XXXXXX)
id=""
cleanup() {
  if [[ -n $id ]]; then
    "$bin/deepbox" sandbox rm "$id" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
# This run's sandboxes, images and snapshots only (root's default would be
# /run/deepbox, shared with everything else on the machine).
export DEEPBOX_STATE_DIR=$work/state XDG_STATE_HOME=$work/xdg

echo "release-smoke: the example (replayed conversation)"
env -u ANTHROPIC_API_KEY -u DEEPBOX_MODEL "$bin/deepbox-fib-example" >"$work/example.log" 2>&1 || {
  cat "$work/example.log" >&2
  echo "release-smoke: the example failed" >&2
  exit 1
}
grep -q "Sandbox verification passed" "$work/example.log" || {
  cat "$work/example.log" >&2
  echo "release-smoke: the example did not verify its script" >&2
  exit 1
}

echo "release-smoke: create, cp in, exec, cp out, rm"
mkdir -p "$work/in/sub"
printf 'alpha\n' >"$work/in/a.txt"
head -c 300000 /dev/urandom >"$work/in/sub/b.bin"
ln -s a.txt "$work/in/link"
id=$("$bin/deepbox" sandbox create)
"$bin/deepbox" sandbox cp "$work/in" "$id:/workspace/in"
got=$("$bin/deepbox" sandbox exec "$id" -- sh -c 'cat /workspace/in/link; id -u')
[[ $got == $'alpha\n1000' ]] || { echo "release-smoke: exec printed '$got'" >&2; exit 1; }
"$bin/deepbox" sandbox cp "$id:/workspace/in" "$work/out"
diff -r --no-dereference "$work/in" "$work/out" || { echo "release-smoke: the round trip changed the tree" >&2; exit 1; }
"$bin/deepbox" sandbox rm "$id" >/dev/null
id=""

if [[ -n $dev ]]; then
  echo "release-smoke: the daemon's integration tests against the release daemon"
  DEEPBOX_SANDBOXD_BIN=$bin/deepbox-sandboxd ctest --test-dir "$dev" \
    -R '^sandboxd_integration_test\.' --no-tests=error --output-on-failure -j2 >"$work/ctest.log" 2>&1 || {
    cat "$work/ctest.log" >&2
    exit 1
  }
  grep "tests passed" "$work/ctest.log"
fi
echo "release-smoke: OK"
