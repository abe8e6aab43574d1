#!/usr/bin/env bash
# Makes a self-contained, relocatable copy of deepbox-sandboxd: the binary,
# every shared library it links and the dynamic loader, with the binary's
# interpreter and RPATH pointing into the bundle. Copied into any image (the
# SandboxTemplate's init container puts it in an emptyDir mounted at
# /deepbox), it runs whatever libraries that image has, or none at all.
#
#   deploy/k8s/bundle-sandboxd.sh BINARY DEST MOUNT
#     BINARY  the built deepbox-sandboxd
#     DEST    directory to fill now (DEST/bin, DEST/lib)
#     MOUNT   absolute path DEST will have when it runs (e.g. /deepbox);
#             the ELF interpreter must be an absolute path, so it is baked in.
#
# Needs patchelf and ldd. Used by deploy/k8s/Containerfile and tested by
# tests/k8s/bundle_test.cc (runs the bundle in an otherwise empty root).
set -euo pipefail
if [[ $# -ne 3 ]]; then
  echo "usage: $0 BINARY DEST MOUNT" >&2
  exit 2
fi
bin=$1 dest=$2 mount=$3
[[ -x "$bin" ]] || { echo "$0: $bin is not an executable" >&2; exit 1; }
[[ "$mount" == /* ]] || { echo "$0: MOUNT must be an absolute path, got '$mount'" >&2; exit 2; }
command -v patchelf >/dev/null || { echo "$0: patchelf is not installed" >&2; exit 1; }

interp=$(patchelf --print-interpreter "$bin")
loader=$(basename "$interp")
mkdir -p "$dest/bin" "$dest/lib"
# Every resolved dependency (ldd's "name => /path (addr)" lines).
missing=$(ldd "$bin" | awk '/=> not found/ { print $1 }')
if [[ -n "$missing" ]]; then
  echo "$0: unresolved libraries: $missing" >&2
  exit 1
fi
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
  cp -L "$lib" "$dest/lib/"
done
# Libraries the binary dlopen()s on first use (fs/archive_loader.h: libarchive
# for tar and image layers; sandboxd/server/nghttp2_loader.h: libnghttp2 for
# gRPC; net/openssl_loader.h: libssl and its libcrypto for token checks), with
# their own dependencies: ldd does not see them.
for soname in libarchive.so.13 libnghttp2.so.14 libssl.so.3; do
  grep -qF "$soname" "$bin" || continue
  # awk reads to the end (no early exit): ldconfig killed by SIGPIPE would
  # fail the pipeline under pipefail (exit 141, seen in CI).
  lib=$(ldconfig -p | awk -v want="$soname" '!found && $1 == want && $NF ~ /^\// { print $NF; found = 1 }')
  [[ -n "$lib" ]] || { echo "$0: $bin loads $soname, which is not installed" >&2; exit 1; }
  cp -L "$lib" "$dest/lib/"
  ldd "$lib" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r dep; do
    cp -L "$dep" "$dest/lib/"
  done
done
cp -L "$interp" "$dest/lib/$loader"
cp "$bin" "$dest/bin/deepbox-sandboxd.tmp"
# DT_RPATH, not DT_RUNPATH (--force-rpath): RUNPATH only serves the binary's
# own DT_NEEDED entries, so the libraries' dependencies (libarchive's
# libnettle, ...) would be searched in the image and not found.
patchelf --set-interpreter "$mount/lib/$loader" --force-rpath --set-rpath '$ORIGIN/../lib' \
  "$dest/bin/deepbox-sandboxd.tmp"
chmod 0755 "$dest/bin/deepbox-sandboxd.tmp"
mv -f "$dest/bin/deepbox-sandboxd.tmp" "$dest/bin/deepbox-sandboxd"
chmod -R a+rX "$dest"
