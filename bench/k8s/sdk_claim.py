"""The upstream Python SDK (PyPI k8s-agent-sandbox, pinned) doing what the
deepbox side of bench/k8s/real_bench.sh does: claim from the warm pool, wait
for Ready, run `true` through the router (the driver deletes the claims).
  sdk_claim.py NAMESPACE ROUTER_URL once         one claim; prints ms to the result
  sdk_claim.py NAMESPACE ROUTER_URL loop N       N claims in this process, one ms per line
The SDK reads KUBECONFIG. It sends X-Sandbox-Pod-IP (read from the Sandbox's
status); a request without it is refused by the test router (no DNS lookup).
"""
import sys
import time

from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig


def claim_and_run(client, namespace):
    start = time.perf_counter()
    sandbox = client.create_sandbox(warmpool="deepagents-warmpool", namespace=namespace)
    result = sandbox.commands.run("true")
    elapsed = (time.perf_counter() - start) * 1000
    if result.exit_code != 0:
        raise SystemExit(f"sdk: `true` exited {result.exit_code}")
    return elapsed  # the driver deletes the claims between iterations


def main():
    namespace, router, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    client = SandboxClient(connection_config=SandboxDirectConnectionConfig(api_url=router))
    if mode == "once":
        print(f"{claim_and_run(client, namespace):.2f}")
        return
    for _ in range(int(sys.argv[4])):
        # Each claim when the driver says (the pool refilled, as for deepbox).
        if not sys.stdin.readline():
            break
        print(f"{claim_and_run(client, namespace):.2f}", flush=True)


if __name__ == "__main__":
    main()
