#!/usr/bin/env bash
# Builds deepbox (release preset) and runs the main example: a deep agent writes
# and runs fib.py inside a fresh local sandbox, then the example verifies it in
# the sandbox and deletes the sandbox. With ANTHROPIC_API_KEY set it uses Claude;
# without it, it replays the recorded (scripted) conversation and says so.
#   scripts/demo.sh [example flags...]     e.g. --sandbox k8s
#   SKIP_DEPS=1 scripts/demo.sh            skip the apt step
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${SKIP_DEPS:-0}" != 1 ]]; then
  ./scripts/install-deps.sh
fi
cmake --preset release >/dev/null
cmake --build --preset release --target deepbox deepbox-sandboxd deepbox-fib-example
exec ./build/release/bin/deepbox-fib-example "$@"
