"""``deepbox.dcode.DeepboxProvider`` against the sandbox provider contract.

langchain-tests documents ``SandboxProviderIntegrationTests`` (a clean
provider whose ``list()`` is empty; create, visible in ``list``, ``delete``
back to empty; execute; upload, download and a round trip; reconnecting by
id creates nothing; a missing id raises ``SandboxNotFoundError``; ``delete``
is idempotent and accepts missing ids; async twins of each), but no release
served here ships it (1.1.9 is the newest). So:

- when ``langchain_tests.integration_tests`` has the class, the upstream suite
  runs on the local provider and on the fake cluster (``TestUpstream*``);
- else ``test_upstream_provider_suite`` is skipped, naming the missing class,
  and ``TestLocalProviderContract`` / ``TestK8sProviderContract`` (this
  module's own tests of the same documented contract) run.

dcode's own ``SandboxProvider`` interface (abstract methods, keyword-only
signatures, its ``SandboxNotFoundError``, its async wrappers) is checked in
test_dcode.py, inside the venv that has deepagents-code.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("deepagents")

from conftest import require_sandboxes  # noqa: E402
from test_k8s import cluster  # noqa: E402,F401 (the fake cluster fixture)

from deepbox import Sandbox  # noqa: E402
from deepbox.dcode import DeepboxProvider, SandboxNotFoundError  # noqa: E402
from deepbox.errors import DeepboxError  # noqa: E402
from deepbox.errors import SandboxNotFoundError as CLISandboxNotFoundError  # noqa: E402

try:
    from langchain_tests.integration_tests import SandboxProviderIntegrationTests  # type: ignore[attr-defined]
except ImportError:
    SandboxProviderIntegrationTests = None

UPSTREAM_CLASS = "langchain_tests.integration_tests.SandboxProviderIntegrationTests"


def _local_provider() -> Iterator[DeepboxProvider]:
    require_sandboxes()
    provider = DeepboxProvider(labels={"deepbox.test/python": "provider", "deepbox.test/scope": uuid.uuid4().hex[:12]})
    try:
        yield provider
    finally:
        for item in provider.list()["items"]:
            provider.delete(sandbox_id=item["sandbox_id"])


def _k8s_provider(cluster: dict[str, Any]) -> Iterator[DeepboxProvider]:
    provider = DeepboxProvider(
        provider="k8s",
        labels={"deepbox.test/python": "provider", "deepbox.test/scope": uuid.uuid4().hex[:12]},
        kubeconfig=cluster["kubeconfig"],
        router_url=cluster["router_url"],
        router_token=cluster["router_token"],
        ready_timeout=60,
    )
    try:
        yield provider
    finally:
        for item in provider.list()["items"]:
            provider.delete(sandbox_id=item["sandbox_id"])


if SandboxProviderIntegrationTests is not None:  # the day a release ships it

    class TestUpstreamLocalProvider(SandboxProviderIntegrationTests):  # type: ignore[misc,valid-type]
        @pytest.fixture
        def sandbox_provider(self) -> Iterator[DeepboxProvider]:
            yield from _local_provider()

    class TestUpstreamK8sProvider(SandboxProviderIntegrationTests):  # type: ignore[misc,valid-type]
        @pytest.fixture
        def sandbox_provider(self, cluster: dict[str, Any]) -> Iterator[DeepboxProvider]:  # noqa: F811
            yield from _k8s_provider(cluster)

else:

    def test_upstream_provider_suite() -> None:
        pytest.skip(
            f"{UPSTREAM_CLASS} is not in langchain-tests {importlib.metadata.version('langchain-tests')}: "
            "this module's own contract tests stand in for it"
        )


class ProviderContract:
    """The documented contract, test by test; subclasses give ``sandbox_provider``."""

    missing_id = "sb-000000000000"

    # ---- sync ----------------------------------------------------------------------

    def test_blank_slate(self, sandbox_provider: DeepboxProvider) -> None:
        assert sandbox_provider.list()["items"] == []

    def test_list_schema(self, sandbox_provider: DeepboxProvider) -> None:
        page = sandbox_provider.list()
        assert set(page) == {"items", "cursor"}
        assert isinstance(page["items"], list) and page["cursor"] is None

    def test_create_list_delete(self, sandbox_provider: DeepboxProvider) -> None:
        backend = sandbox_provider.get_or_create()
        items = sandbox_provider.list()["items"]
        assert [i["sandbox_id"] for i in items] == [backend.id]
        assert isinstance(items[0]["metadata"], dict)
        sandbox_provider.delete(sandbox_id=backend.id)
        assert sandbox_provider.list()["items"] == []

    def test_execute_upload_download(self, sandbox_provider: DeepboxProvider) -> None:
        backend = sandbox_provider.get_or_create()
        r = backend.execute("echo hello; echo oops >&2; exit 3")
        assert r.exit_code == 3 and "hello" in r.output and "oops" in r.output
        blob = bytes(range(256)) * 64
        up = backend.upload_files([("/workspace/contract/one.txt", b"one\n"), ("/workspace/contract/blob", blob)])
        assert [u.error for u in up] == [None, None]
        down = backend.download_files(["/workspace/contract/one.txt", "/workspace/contract/blob", "/workspace/nope"])
        assert down[0].content == b"one\n" and down[0].error is None
        assert down[1].content == blob
        assert down[2].error == "file_not_found"

    def test_reconnect_creates_nothing(self, sandbox_provider: DeepboxProvider) -> None:
        backend = sandbox_provider.get_or_create()
        backend.upload_files([("/workspace/marker", b"here")])
        again = sandbox_provider.get_or_create(sandbox_id=backend.id)
        assert again.id == backend.id
        assert again.download_files(["/workspace/marker"])[0].content == b"here"
        assert [i["sandbox_id"] for i in sandbox_provider.list()["items"]] == [backend.id]

    def test_reattach_from_another_provider_object(self, sandbox_provider: DeepboxProvider, other_provider: DeepboxProvider) -> None:
        """A sandbox made by one provider object is reached by another (``sandbox inspect --json``)."""
        backend = sandbox_provider.get_or_create()
        backend.upload_files([("/workspace/marker", b"from the first")])
        again = other_provider.get_or_create(sandbox_id=backend.id)
        assert again.id == backend.id
        assert again.download_files(["/workspace/marker"])[0].content == b"from the first"
        r = again.execute("echo second > /workspace/second; cat /workspace/marker")
        assert (r.output, r.exit_code) == ("from the first", 0)
        assert backend.download_files(["/workspace/second"])[0].content == b"second\n"
        # Reattaching made nothing new and took nothing over.
        assert [i["sandbox_id"] for i in sandbox_provider.list()["items"]] == [backend.id]

    def test_reattach_from_another_process(self, sandbox_provider: DeepboxProvider, provider_args: dict[str, Any]) -> None:
        """Another Python process reattaches by id alone, and gets SandboxNotFoundError for a missing id."""
        backend = sandbox_provider.get_or_create()
        backend.upload_files([("/workspace/marker", b"cross-process")])
        script = (
            "import json, sys\n"
            "from deepbox.dcode import DeepboxProvider, SandboxNotFoundError\n"
            "p = DeepboxProvider(**json.loads(sys.argv[1]))\n"
            "sb = p.get_or_create(sandbox_id=sys.argv[2])\n"
            "print(sb.execute('cat /workspace/marker').output)\n"
            "try:\n"
            "    p.get_or_create(sandbox_id=sys.argv[3])\n"
            "except SandboxNotFoundError as e:\n"
            "    print('missing:', type(e).__name__)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", script, json.dumps(provider_args), backend.id, self.missing_id],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == ["cross-process", "missing: SandboxNotFoundError"]
        assert [i["sandbox_id"] for i in sandbox_provider.list()["items"]] == [backend.id]

    def test_missing_id_raises(self, sandbox_provider: DeepboxProvider) -> None:
        with pytest.raises(SandboxNotFoundError):
            sandbox_provider.get_or_create(sandbox_id=self.missing_id)
        assert sandbox_provider.list()["items"] == []

    def test_delete_is_idempotent(self, sandbox_provider: DeepboxProvider) -> None:
        backend = sandbox_provider.get_or_create()
        sandbox_provider.delete(sandbox_id=backend.id)
        sandbox_provider.delete(sandbox_id=backend.id)
        sandbox_provider.delete(sandbox_id=self.missing_id)
        assert sandbox_provider.list()["items"] == []
        with pytest.raises(SandboxNotFoundError):
            sandbox_provider.get_or_create(sandbox_id=backend.id)

    # ---- async twins ----------------------------------------------------------------

    def test_async_create_list_delete(self, sandbox_provider: DeepboxProvider) -> None:
        async def run() -> None:
            assert (await sandbox_provider.alist())["items"] == []
            backend = await sandbox_provider.aget_or_create()
            assert [i["sandbox_id"] for i in (await sandbox_provider.alist())["items"]] == [backend.id]
            r = await backend.aexecute("printf async")
            assert (r.output, r.exit_code) == ("async", 0)
            up = await backend.aupload_files([("/workspace/a.bin", b"\x00\x01async")])
            assert up[0].error is None
            down = await backend.adownload_files(["/workspace/a.bin"])
            assert down[0].content == b"\x00\x01async"
            again = await sandbox_provider.aget_or_create(sandbox_id=backend.id)
            assert again.id == backend.id
            await sandbox_provider.adelete(sandbox_id=backend.id)
            await sandbox_provider.adelete(sandbox_id=backend.id)
            assert (await sandbox_provider.alist())["items"] == []

        asyncio.run(run())

    def test_async_missing_id_raises(self, sandbox_provider: DeepboxProvider) -> None:
        async def run() -> None:
            with pytest.raises(SandboxNotFoundError):
                await sandbox_provider.aget_or_create(sandbox_id=self.missing_id)
            await sandbox_provider.adelete(sandbox_id=self.missing_id)

        asyncio.run(run())


class TestLocalProviderContract(ProviderContract):
    @pytest.fixture
    def sandbox_provider(self) -> Iterator[DeepboxProvider]:
        yield from _local_provider()

    @pytest.fixture
    def other_provider(self) -> DeepboxProvider:
        return DeepboxProvider(labels={"deepbox.test/python": "other"})

    @pytest.fixture
    def provider_args(self) -> dict[str, Any]:
        return {}


class TestK8sProviderContract(ProviderContract):
    missing_id = "default/sandbox-claim-00000000"

    @pytest.fixture
    def sandbox_provider(self, cluster: dict[str, Any]) -> Iterator[DeepboxProvider]:  # noqa: F811
        yield from _k8s_provider(cluster)

    @pytest.fixture
    def other_provider(self, cluster: dict[str, Any]) -> DeepboxProvider:  # noqa: F811
        return DeepboxProvider(provider="k8s", **self._claim_args(cluster))

    @pytest.fixture
    def provider_args(self, cluster: dict[str, Any]) -> dict[str, Any]:  # noqa: F811
        return {"provider": "k8s", **self._claim_args(cluster)}

    @staticmethod
    def _claim_args(cluster: dict[str, Any]) -> dict[str, Any]:  # noqa: F811
        return {
            "kubeconfig": cluster["kubeconfig"],
            "router_url": cluster["router_url"],
            "router_token": cluster["router_token"],
        }

    def test_reattach_to_another_users_claim_says_so(
        self,
        sandbox_provider: DeepboxProvider,
        other_provider: DeepboxProvider,
        tmp_path: Any,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A claim made with another user's claim key: found, but its daemon is not ours to drive."""
        backend = sandbox_provider.get_or_create()
        with monkeypatch.context() as m:
            m.setenv("DEEPBOX_K8S_CLAIM_KEY_FILE", str(tmp_path / "another-users-key"))
            with pytest.raises(DeepboxError, match="another user's claim key"):
                other_provider.get_or_create(sandbox_id=backend.id)
        assert other_provider.get_or_create(sandbox_id=backend.id).id == backend.id

    def test_inspect_record_of_a_claim(self, sandbox_provider: DeepboxProvider, cluster: dict[str, Any]) -> None:  # noqa: F811
        """``Sandbox.inspect``: the CLI's record, with the daemon token for its owner only."""
        backend = sandbox_provider.get_or_create()
        rec = Sandbox.inspect(backend.id, kubeconfig=cluster["kubeconfig"], router_url=cluster["router_url"])
        assert rec["id"] == backend.id and rec["provider"] == "k8s" and rec["state"] == "Ready"
        assert rec["url"] == cluster["router_url"]
        assert rec["owner"] is True and rec["token"] == rec["headers"]["X-Sandboxd-Token"]
        assert rec["labels"]["deepbox.test/python"] == "provider"
        assert cluster["router_token"] not in json.dumps(rec)
        with pytest.raises(CLISandboxNotFoundError):
            Sandbox.inspect(self.missing_id, kubeconfig=cluster["kubeconfig"])
