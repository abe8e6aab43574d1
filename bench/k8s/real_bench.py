"""Claim -> Ready -> first command on a REAL API server (bench/k8s/README.md):
deepbox vs the upstream Python SDK (PyPI k8s-agent-sandbox, pinned), side by
side in one run against the same cluster, warm pool and router.
  real_bench.py CLUSTER_DIR DEEPBOX_BIN SDK_PYTHON [ITERATIONS]
CLUSTER_DIR is what scripts/k8s-real-cluster.sh up wrote; bench_k8s_claim is
taken from DEEPBOX_BIN's directory (or $BENCH_K8S_CLAIM). Rows:
  deepbox in process: `bench_k8s_claim real`, the production
      K8sSandboxProvider in a started process: claim, Ready, `true`; split
      into (a) until the claim's Ready event arrived on the watch and (b)
      deepbox's time after it until `true`'s result (b = the lease handed
      out + the exec), with this thread's CPU time in (b) and a second `true`
      right after. "reused provider": check_daemon = false (the first command
      is the daemon's check), the provider kept across claims as the SDK's
      in-process row keeps its client; "new provider": made for the claim
      (kubeconfig, TLS); "check_daemon": the default, Claim() returns once
      the daemon answered; "quiet": reused, with a 3 s pause at the Ready
      event (not counted), so that (b) runs after the pool's refill (the node
      agent starting the next pod on this machine) has settled;
  deepbox whole process: `deepbox sandbox create --provider k8s --json` then
      `deepbox sandbox exec ID -- true`, wall time of both processes;
  SDK whole process: `python sdk_claim.py ... once` (interpreter start,
      imports, create_sandbox, commands.run("true")), wall time;
  SDK in process: create_sandbox + commands.run("true") in a started process;
  5 concurrent claims: 5 at once on a pool of 5, wall time to the last result
      (in process: 5 threads sharing one provider; per claim, when its create
      was answered, when its Ready event came, and deepbox's time after it).
  busy CPU: the whole machine's (nice'd processes left out), while one claim
      and while 5 concurrent claims ran, and by command: whether the
      machine's two cores, not the client, bound the concurrent rounds.
Between iterations (untimed) the claims are deleted and the pool refilled.
BENCH_SKIP_SDK=1 leaves the SDK rows out (a quick deepbox-only run).
"""
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


def cpu_by_pid():
    """{pid: (comm, utime+stime in ms)} of the processes not nice'd."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2:].split()
        if int(fields[16]) > 0:  # nice
            continue
        out[pid] = (comm, (int(fields[11]) + int(fields[12])) * TICK_MS)
    return out


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    cluster, deepbox, sdk_python = sys.argv[1], sys.argv[2], sys.argv[3]
    iterations = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    skip_sdk = os.environ.get("BENCH_SKIP_SDK") == "1"
    bench = os.environ.get("BENCH_K8S_CLAIM") or os.path.join(os.path.dirname(deepbox),
                                                               "bench_k8s_claim")
    env_file = dict(l.strip().split("=", 1) for l in open(os.path.join(cluster, "env")) if "=" in l)
    kubectl = [env_file["DEEPBOX_K8S_REAL_BIN"] + "/kubectl", "--kubeconfig", env_file["KUBECONFIG"]]
    router = env_file["AGENT_SANDBOX_ROUTER_URL"]
    ns = f"bench-{os.getpid()}"
    env = dict(os.environ, KUBECONFIG=env_file["KUBECONFIG"], AGENT_SANDBOX_ROUTER_URL=router,
               AGENT_SANDBOX_NAMESPACE=ns)
    load_start = loadavg()

    def k(*args, stdin=None):
        return subprocess.run(kubectl + list(args), input=stdin, capture_output=True, text=True,
                              check=True).stdout

    root = os.path.dirname(os.path.dirname(HERE))
    manifests = (open(os.path.join(root, "deploy/k8s/sandbox-template.yaml")).read() + "\n---\n" +
                 open(os.path.join(root, "deploy/k8s/warmpool.yaml")).read())
    manifests = manifests.replace("namespace: default", f"namespace: {ns}")
    k("create", "namespace", ns)
    k("apply", "-f", "-", stdin=manifests)

    def pool_ready(n):
        for _ in range(1200):
            out = k("get", "sandboxwarmpool", "deepagents-warmpool", "-n", ns, "-o",
                    "jsonpath={.status.readyReplicas}")
            if out and int(out) >= n:
                return
            time.sleep(0.05)
        raise SystemExit("the warm pool did not become ready")

    def reset(n=1):
        k("delete", "sandboxclaims", "--all", "-n", ns, "--wait=true")
        pool_ready(n)

    def deepbox_once():
        start = time.perf_counter()
        r = subprocess.run([deepbox, "sandbox", "create", "--provider", "k8s", "--json"], env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("deepbox sandbox create: " + r.stderr)
        sid = json.loads(r.stdout)["id"]
        r = subprocess.run([deepbox, "sandbox", "exec", sid, "--", "true"], env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("deepbox sandbox exec: " + r.stderr)
        return (time.perf_counter() - start) * 1000

    def sdk_once():
        start = time.perf_counter()
        subprocess.run([sdk_python, os.path.join(HERE, "sdk_claim.py"), ns, router, "once"],
                       env=env, check=True, capture_output=True)
        return (time.perf_counter() - start) * 1000

    inproc = subprocess.Popen([bench, "real", ns], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)

    # The machine's busy CPU while the in-process claims ran (one claim,
    # reused provider; 5 concurrent: from the start until every claim ran its
    # commands, as bench_k8s_claim reports it), and by command over the whole
    # 5-concurrent exchange (deletes included): how much of the two cores the
    # claims' work took.
    cpu_rounds = {"reuse": [], "conc 5": []}
    cpu_commands = {}

    def deepbox_in(command):
        before_cmd = cpu_by_pid() if command == "conc 5" else None
        inproc.stdin.write(command + "\n")
        inproc.stdin.flush()
        answer = json.loads(inproc.stdout.readline())
        if command in cpu_rounds and "busy" in answer:
            cpu_rounds[command].append((answer["wall"], answer["busy"]))
        if before_cmd is not None:
            # By pid (a kernel worker's name changes with its work item), then
            # summed by name; kernel workers as one.
            for pid, (comm, ms) in cpu_by_pid().items():
                comm = "kernel workers" if comm.startswith("kworker") else comm
                cpu_commands[comm] = (cpu_commands.get(comm, 0) + ms -
                                      before_cmd.get(pid, (comm, 0))[1])
        if "error" in answer:
            raise SystemExit(f"bench_k8s_claim real ({command}): {answer['error']}")
        return answer

    rows = {"deepbox in process, reused provider": [], "deepbox in process, new provider": [],
            "deepbox in process, check_daemon": [], "deepbox whole process": []}
    if not skip_sdk:
        rows.update({"SDK in process": [], "SDK whole process": []})
    split = {"reuse": [], "fresh": [], "checked": [], "quiet": []}  # in-process timelines
    sdk = None
    try:
        pool_ready(1)
        if not skip_sdk:
            sdk = subprocess.Popen([sdk_python, os.path.join(HERE, "sdk_claim.py"), ns, router,
                                    "loop", str(iterations)], env=env, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        order = ["db-in", "db-fresh", "db-checked", "db-quiet", "deepbox", "sdk-in", "sdk"]
        if skip_sdk:
            order = order[:5]
        for i in range(iterations):
            # Alternating order, the same servers.
            for what in (order if i % 2 == 0 else order[::-1]):
                reset()
                if what.startswith("db-"):
                    mode = {"db-in": "reuse", "db-fresh": "fresh", "db-checked": "checked",
                            "db-quiet": "quiet"}[what]
                    t = deepbox_in(mode)
                    split[mode].append(t)
                    name = {"reuse": "deepbox in process, reused provider",
                            "fresh": "deepbox in process, new provider",
                            "checked": "deepbox in process, check_daemon"}.get(mode)
                    if name:
                        rows[name].append(t["done"])
                elif what == "deepbox":
                    rows["deepbox whole process"].append(deepbox_once())
                elif what == "sdk":
                    rows["SDK whole process"].append(sdk_once())
                else:
                    sdk.stdin.write("\n")
                    sdk.stdin.flush()
                    rows["SDK in process"].append(float(sdk.stdout.readline()))
        if sdk:
            sdk.stdin.close()
            sdk.wait()

        # 5 concurrent claims on a pool of 5.
        k("patch", "sandboxwarmpool", "deepagents-warmpool", "-n", ns, "--type", "merge", "-p",
          '{"spec":{"replicas":5}}')
        conc = {"deepbox in process": [], "deepbox whole processes": []}
        if not skip_sdk:
            conc["SDK whole processes"] = []
        conc_claims = []  # the in-process rounds' timelines
        for i in range(max(3, iterations // 4)):
            for what in conc:
                reset(5)
                if what == "deepbox in process":
                    claims = deepbox_in("conc 5")["claims"]
                    conc_claims.append(claims)
                    conc[what].append(max(c["done"] for c in claims))
                    continue
                fn = deepbox_once if what == "deepbox whole processes" else sdk_once
                start = time.perf_counter()
                with concurrent.futures.ThreadPoolExecutor(5) as ex:
                    list(ex.map(lambda _: fn(), range(5)))
                conc[what].append((time.perf_counter() - start) * 1000)
    finally:
        if inproc.stdin:
            inproc.stdin.close()
        inproc.wait()
        subprocess.run(kubectl + ["delete", "namespace", ns, "--wait=false"], capture_output=True)

    print(f"load average at start {load_start}, at end {loadavg()}; {iterations} iterations")
    print(f"{'':38s}{'p50':>9s}{'p90':>9s}  (ms)")
    for name, xs in rows.items():
        print(f"{name:38s}{pct(xs, .5):9.1f}{pct(xs, .9):9.1f}")
    print("\ndeepbox in process, split at the claim's Ready event on the watch:")
    print(f"{'':38s}{'p50':>9s}{'p90':>9s}  (ms)")
    for mode, label in (("reuse", "reused provider"), ("fresh", "new provider"),
                        ("checked", "reused provider, check_daemon = true (the default)"),
                        ("quiet", "reused provider, 3 s pause at the Ready event (not counted)")):
        ts = split[mode]
        parts = [("total", [t["done"] for t in ts]),
                 ("(a) start -> Ready event", [t["ready"] for t in ts]),
                 ("    of which start -> create answered", [t["created"] for t in ts]),
                 ("(b) Ready event -> result", [t["done"] - t["ready"] for t in ts]),
                 ("    of which daemon's first answer", [t["connected"] - t["ready"] for t in ts]),
                 ("    of which the exec of `true`", [t["done"] - t["connected"] for t in ts]),
                 ("    deepbox's CPU time in (b)", [t["cpu_after_ready"] for t in ts]),
                 ("a second `true` right after", [t["second"] for t in ts])]
        print(f"  {label}")
        for name, xs in parts:
            print(f"  {name:36s}{pct(xs, .5):9.1f}{pct(xs, .9):9.1f}")

    d_in = statistics.median(rows["deepbox in process, reused provider"])
    d_whole = statistics.median(rows["deepbox whole process"])
    print()
    if not skip_sdk:
        print(f"SDK in process / deepbox in process (reused provider): "
              f"{statistics.median(rows['SDK in process']) / d_in:.1f}x")
        print(f"SDK whole process / deepbox whole process: "
              f"{statistics.median(rows['SDK whole process']) / d_whole:.1f}x")
    one = {"deepbox in process": d_in, "deepbox whole processes": d_whole}
    if not skip_sdk:
        one["SDK whole processes"] = statistics.median(rows["SDK whole process"])
    for what, xs in conc.items():
        m = statistics.median(xs)
        print(f"5 concurrent claims, {what}: p50 {m:.1f} ms ({m / one[what]:.2f}x one claim; "
              f"rounds {', '.join(f'{x:.0f}' for x in xs)})")
    print("\n5 concurrent claims in process, per round, each claim in the order of its Ready "
          "event (ms from the start):\n  create answered | Ready event | (b) deepbox's time after "
          "it")
    for claims in conc_claims:
        claims = sorted(claims, key=lambda c: c["ready"])
        created = " ".join(f"{c['created']:5.1f}" for c in claims)
        ready = " ".join(f"{c['ready']:6.1f}" for c in claims)
        after = " ".join(f"{c['done'] - c['ready']:5.1f}" for c in claims)
        print(f"  created {created} | ready {ready} | (b) {after}")
    cores = os.cpu_count()
    print(f"\nbusy CPU of the whole machine while the claims ran, to their second `true` "
          f"(nice'd processes left out; {cores} cores; /proc/stat, 10 ms ticks), mean of the "
          f"rounds:")
    for command, label in (("reuse", "one claim (reused provider)"),
                           ("conc 5", "5 concurrent claims")):
        xs = cpu_rounds[command]
        if xs:
            wall, busy = sum(w for w, _ in xs), sum(b for _, b in xs)
            print(f"  {label:28s} wall {wall / len(xs):7.1f} ms/round, busy CPU "
                  f"{busy / len(xs):7.1f} ms/round = {busy / (wall * cores) * 100:3.0f}% "
                  f"of {cores} cores")
    rounds = len(cpu_rounds["conc 5"])
    if rounds:
        top = sorted(cpu_commands.items(), key=lambda kv: -kv[1])[:8]
        print("  5 concurrent, CPU by command over the whole exchange, deletes included "
              "(ms/round, processes alive at its end): " +
              ", ".join(f"{c} {ms / rounds:.0f}" for c, ms in top if ms > 0))
    gaps = [b["ready"] - a["ready"] for claims in conc_claims
            for a, b in zip(sorted(claims, key=lambda c: c["ready"]),
                            sorted(claims, key=lambda c: c["ready"])[1:])]
    if gaps:
        after = statistics.median(c["done"] - c["ready"] for r in conc_claims for c in r)
        print(f"  between one claim's Ready event and the next: p50 "
              f"{statistics.median(gaps):.1f} ms; (b) p50 {after:.1f} ms")


if __name__ == "__main__":
    main()
