#!/usr/bin/env bash
# Installs everything deepbox needs to build and test, from Debian 12 packages only.
# Never add libboost-dev / libboost-all-dev: they bring Boost 1.74, which conflicts
# with the 1.81 packages below.
set -euo pipefail
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config git ca-certificates \
  libboost1.81-dev libboost-url1.81-dev libboost-json1.81-dev \
  libssl-dev libnghttp2-dev libyaml-cpp-dev libseccomp-dev libcap-dev libre2-dev \
  libspdlog-dev libfmt-dev libcli11-dev libarchive-dev libexpected-dev libutfcpp-dev \
  libedit-dev libgtest-dev libgmock-dev googletest libbenchmark-dev \
  ripgrep bubblewrap util-linux iproute2 iptables nftables passt slirp4netns tmux procps openssl \
  python3 python3-venv clang-format patchelf \
  clang-14 libclang-rt-14-dev curl mold \
  docker-registry apache2-utils skopeo zstd libtomlplusplus-dev
# npm, for the MCP conformance suite (scripts/mcp-conformance.sh installs it
# and Node 22 with npm): Debian's, when the machine has none of its own.
if ! command -v npm >/dev/null; then
  $SUDO apt-get install -y -qq --no-install-recommends npm
fi
