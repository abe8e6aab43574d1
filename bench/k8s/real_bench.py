"""Claim -> Ready -> first command on a REAL API server (bench/k8s/README.md):
deepbox vs the upstream Python SDK (PyPI k8s-agent-sandbox, pinned), side by
side in one run against the same cluster, warm pool and router.
  real_bench.py CLUSTER_DIR DEEPBOX_BIN SDK_PYTHON [ITERATIONS]
CLUSTER_DIR is what scripts/k8s-real-cluster.sh up wrote. Rows:
  deepbox whole process: `deepbox sandbox create --provider k8s --json` then
      `deepbox sandbox exec ID -- true`, wall time of both processes;
  SDK whole process: `python sdk_claim.py ... once` (interpreter start,
      imports, create_sandbox, commands.run("true")), wall time;
  SDK in process: create_sandbox + commands.run("true") in a started process;
  5 concurrent claims: 5 of the above at once on a pool of 5, wall time to
      the last result.
Between iterations (untimed) the claims are deleted and the pool refilled.
"""
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    cluster, deepbox, sdk_python = sys.argv[1], sys.argv[2], sys.argv[3]
    iterations = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    env_file = dict(l.strip().split("=", 1) for l in open(os.path.join(cluster, "env")) if "=" in l)
    kubectl = [env_file["DEEPBOX_K8S_REAL_BIN"] + "/kubectl", "--kubeconfig", env_file["KUBECONFIG"]]
    router = env_file["AGENT_SANDBOX_ROUTER_URL"]
    ns = f"bench-{os.getpid()}"
    env = dict(os.environ, KUBECONFIG=env_file["KUBECONFIG"], AGENT_SANDBOX_ROUTER_URL=router,
               AGENT_SANDBOX_NAMESPACE=ns)

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

    rows = {"deepbox whole process": [], "SDK whole process": [], "SDK in process": []}
    try:
        pool_ready(1)
        sdk = subprocess.Popen([sdk_python, os.path.join(HERE, "sdk_claim.py"), ns, router, "loop",
                                str(iterations)], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
        for i in range(iterations):
            # Alternating order, the same servers.
            order = ["deepbox", "sdk", "sdk-in"] if i % 2 == 0 else ["sdk-in", "sdk", "deepbox"]
            for what in order:
                reset()
                if what == "deepbox":
                    rows["deepbox whole process"].append(deepbox_once())
                elif what == "sdk":
                    rows["SDK whole process"].append(sdk_once())
                else:
                    sdk.stdin.write("\n")
                    sdk.stdin.flush()
                    rows["SDK in process"].append(float(sdk.stdout.readline()))
        sdk.stdin.close()
        sdk.wait()

        # 5 concurrent claims on a pool of 5.
        k("patch", "sandboxwarmpool", "deepagents-warmpool", "-n", ns, "--type", "merge", "-p",
          '{"spec":{"replicas":5}}')
        conc = {"deepbox": [], "SDK": []}
        for i in range(max(3, iterations // 4)):
            for what in ("deepbox", "SDK"):
                reset(5)
                fn = deepbox_once if what == "deepbox" else sdk_once
                start = time.perf_counter()
                with concurrent.futures.ThreadPoolExecutor(5) as ex:
                    list(ex.map(lambda _: fn(), range(5)))
                conc[what].append((time.perf_counter() - start) * 1000)
    finally:
        subprocess.run(kubectl + ["delete", "namespace", ns, "--wait=false"], capture_output=True)

    def p(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    print(f"{'':28s}{'p50':>10s}{'p90':>10s}  (ms, {iterations} iterations)")
    for name, xs in rows.items():
        print(f"{name:28s}{p(xs, .5):10.1f}{p(xs, .9):10.1f}")
    d = statistics.median(rows["deepbox whole process"])
    print(f"SDK whole process / deepbox whole process: {statistics.median(rows['SDK whole process']) / d:.1f}x")
    print(f"SDK in process / deepbox whole process: {statistics.median(rows['SDK in process']) / d:.1f}x")
    for what, xs in conc.items():
        one = d if what == "deepbox" else statistics.median(rows["SDK whole process"])
        print(f"5 concurrent claims, {what} whole processes: p50 {statistics.median(xs):.1f} ms "
              f"({statistics.median(xs) / one:.2f}x one claim)")


if __name__ == "__main__":
    main()
