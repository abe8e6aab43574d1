"""The upstream k8s-agent-sandbox SDK as a real client of deepbox-sandboxd.

Test harness only (drives an upstream reference component): the SDK's Sandbox
handle, in direct-connection mode, talks to our daemon with its own HTTP code.
The Kubernetes lookups it would make (pod IP) are answered by a stand-in,
because no cluster runs here.
"""
import os
import sys

from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
from k8s_agent_sandbox.sandbox import Sandbox


class NoCluster:
    """Answers the SDK's Kubernetes lookups: there is no cluster here."""

    injected_api_client = None

    def get_sandbox(self, name, namespace):
        return {"status": {}}

    def __getattr__(self, name):
        raise AssertionError(f"unexpected Kubernetes call {name}")


def main():
    url, root = sys.argv[1], sys.argv[2]
    sb = Sandbox(
        claim_name="sandbox-claim-test",
        sandbox_id="sandbox-test",
        namespace="default",
        connection_config=SandboxDirectConnectionConfig(api_url=url),
        k8s_helper=NoCluster(),
    )
    checks = 0

    r = sb.commands.run("echo 'Hello from SDK'")
    assert (r.stdout, r.stderr, r.exit_code) == ("Hello from SDK\n", "", 0), r
    checks += 1
    r = sb.commands.run("sh -c 'echo oops >&2; exit 3'")
    assert (r.stderr, r.exit_code) == ("oops\n", 3), r
    checks += 1

    sb.files.write("sdk/hello.txt", b"written by the upstream SDK\n")
    with open(os.path.join(root, "sdk/hello.txt"), "rb") as f:
        assert f.read() == b"written by the upstream SDK\n"
    checks += 1
    assert sb.files.read("sdk/hello.txt") == b"written by the upstream SDK\n"
    checks += 1
    blob = bytes(range(256)) * 1000
    sb.files.write("sdk/blob.bin", blob)
    assert sb.files.read("sdk/blob.bin") == blob
    checks += 1

    entries = sb.files.list("sdk")
    names = sorted(e.name for e in entries)
    assert names == ["blob.bin", "hello.txt"], names
    kinds = {e.name: e.type for e in entries}
    assert kinds["hello.txt"] == "file", kinds
    checks += 1
    assert sb.files.exists("sdk/hello.txt") is True
    assert sb.files.exists("sdk/nope.txt") is False
    checks += 1

    print(f"{checks} passed, 0 failed")


if __name__ == "__main__":
    main()
