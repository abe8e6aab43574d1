#!/usr/bin/env python3
"""Cold creates of two (or more) deepbox builds, interleaved one by one.

On a shared machine whose load moves by the minute, whole benchmark runs of
two builds one after the other compare the load more than the builds. This
script alternates single creates instead: build A, build B, ..., bwrap, then
again, so that every arm sees the same seconds. Each create is
`DIR/deepbox sandbox create --network none` (the default limits) with a
state directory of its own per build; it reports the CLI's wall time and the
p50 of the supervisor's split (`timings_us` of the sandbox's meta.json), and
the create's p50 over bwrap's (`bwrap --unshare-all ... /bin/true`, timed in
the same rounds). Standard library only; run as root, as the benchmark:

    bench/local/ab_creates.py 30 BASELINE_BIN_DIR build/release/bin
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

STEPS = [
    "spawn", "prepare", "workspace disk", "cgroup", "cgroup attach", "launch", "daemon ready",
    "total",
]
BWRAP = [
    "bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
    "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
    "--tmpfs", "/tmp", "/bin/true",
]
WARM_UP = 2


def create_once(bin_dir, state_dir):
    """One create and its removal: (wall ms, the supervisor's timings in ms)."""
    env = dict(os.environ, DEEPBOX_STATE_DIR=state_dir)
    deepbox = os.path.join(bin_dir, "deepbox")
    start = time.perf_counter()
    made = subprocess.run([deepbox, "sandbox", "create", "--network", "none", "--ttl", "300"],
                          env=env, capture_output=True, text=True, check=True)
    wall_ms = (time.perf_counter() - start) * 1000
    sandbox_id = made.stdout.strip()
    with open(os.path.join(state_dir, "sandboxes", sandbox_id, "meta.json")) as f:
        timings = {k: v / 1000 for k, v in json.load(f).get("timings_us", {}).items()}
    subprocess.run([deepbox, "sandbox", "rm", sandbox_id], env=env, capture_output=True,
                   check=True)
    return wall_ms, timings


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rounds = int(sys.argv[1])
    bin_dirs = sys.argv[2:]
    work = tempfile.mkdtemp(prefix="deepbox-ab-")
    states = {d: os.path.join(work, f"state-{i}") for i, d in enumerate(bin_dirs)}
    walls = {d: [] for d in bin_dirs}
    steps = {d: {s: [] for s in STEPS} for d in bin_dirs}
    bwrap_ms = []
    has_bwrap = shutil.which("bwrap") is not None
    load_before = open("/proc/loadavg").read().split()[:3]
    try:
        for r in range(rounds + WARM_UP):
            for d in bin_dirs:
                wall, timings = create_once(d, states[d])
                if r >= WARM_UP:
                    walls[d].append(wall)
                    for s in STEPS:
                        if s in timings:
                            steps[d][s].append(timings[s])
                # As between the benchmark's iterations: the supervisor just
                # made ready makes the next create's spare disk meanwhile.
                time.sleep(0.2)
            if has_bwrap:
                start = time.perf_counter()
                subprocess.run(BWRAP, check=True)
                if r >= WARM_UP:
                    bwrap_ms.append((time.perf_counter() - start) * 1000)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_after = open("/proc/loadavg").read().split()[:3]

    def p50(xs):
        return f"{statistics.median(xs):10.2f}" if xs else f"{'-':>10}"

    print(f"{rounds} interleaved rounds; load average {' '.join(load_before)} -> "
          f"{' '.join(load_after)}")
    print(f"{'p50 ms':22}" + "".join(f"  [{i}]{'':5}" for i in range(len(bin_dirs))))
    print(f"{'CLI create':22}" + "".join(p50(walls[d]) for d in bin_dirs))
    for s in STEPS:
        print(f"{'  split: ' + s:22}" + "".join(p50(steps[d][s]) for d in bin_dirs))
    if bwrap_ms:
        b = statistics.median(bwrap_ms)
        print(f"{'bwrap':22}{b:10.2f}")
        print(f"{'CLI create / bwrap':22}" +
              "".join(f"{statistics.median(walls[d]) / b:9.2f}x" for d in bin_dirs))
    for i, d in enumerate(bin_dirs):
        print(f"[{i}] {d}")


if __name__ == "__main__":
    main()
