"""The real deepagents-code (dcode, from PyPI) runs a deepbox sandbox through the plugin.

dcode pins another deepagents than the main test venv, so it lives in its
own venv (``$DCODE_VENV``, made by python/run-tests.sh); these tests drive
that venv's python and its ``dcode``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

VENV = os.environ.get("DCODE_VENV")

SCRIPT = r"""
import json, sys
from deepagents_code.integrations.sandbox_registry import SandboxRegistry
from deepagents_code.integrations.sandbox_factory import create_sandbox, get_default_working_dir, verify_sandbox_deps

reg = SandboxRegistry()
meta = reg.get_metadata("deepbox")
verify_sandbox_deps("deepbox")
out = {"providers": reg.available_providers(), "working_dir": get_default_working_dir("deepbox"),
       "supports_sandbox_id": meta.supports_sandbox_id}
with create_sandbox("deepbox") as backend:
    out["id"] = backend.id
    out["class"] = type(backend).__name__
    r = backend.execute("pwd; id -u")
    out["execute"] = [r.output, r.exit_code]
    out["write"] = backend.write("/workspace/hello.txt", "from dcode").error
    out["read"] = backend.read("/workspace/hello.txt").file_data["content"]
    out["glob"] = [m["path"] for m in backend.glob("*.txt").matches]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def dcode_python() -> str:
    if not VENV:
        pytest.skip("DCODE_VENV is not set (python/run-tests.sh makes the dcode venv; SKIP_DCODE=1 skips it)")
    py = Path(VENV) / "bin" / "python"
    if not py.is_file():
        pytest.skip(f"no python in DCODE_VENV={VENV}")
    return str(py)


def test_dcode_is_the_pypi_release(dcode_python: str) -> None:
    out = subprocess.run(
        [dcode_python, "-c", "import importlib.metadata as m; print(m.version('deepagents-code'), m.version('deepagents'))"],
        capture_output=True, text=True, check=True,
    )
    code_version, da_version = out.stdout.split()
    assert code_version == "0.1.57" and da_version.startswith("0.7.")


def test_dcode_runs_a_deepbox_sandbox_through_the_plugin(dcode_python: str, deepbox_bin: str) -> None:
    p = subprocess.run([dcode_python, "-c", SCRIPT], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert "deepbox" in out["providers"]
    assert out["working_dir"] == "/workspace" and out["supports_sandbox_id"]
    assert out["class"] == "DeepboxSandbox"
    assert out["execute"] == ["/workspace\n1000\n", 0]
    assert out["write"] is None and out["read"] == "from dcode"
    assert out["glob"] == ["/workspace/hello.txt"]
    # dcode deleted the sandbox it created on exit.
    ls = subprocess.run([deepbox_bin, "sandbox", "ls", "-q"], capture_output=True, text=True, check=True)
    assert out["id"] not in ls.stdout


def test_dcode_cli_lists_the_provider(dcode_python: str) -> None:
    dcode = str(Path(dcode_python).parent / "dcode")
    p = subprocess.run([dcode, "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0
    assert "--sandbox" in p.stdout


def test_dcode_headless_runs_its_tools_in_a_deepbox_sandbox(dcode_python: str, deepbox_bin: str, tmp_path: Path) -> None:
    """``dcode -n ... --sandbox deepbox``: dcode's own test model (selected by a
    config ``class_path``, no network) calls write_file, which lands in the sandbox."""
    from deepbox import Sandbox

    home = tmp_path / "home"
    (home / ".deepagents").mkdir(parents=True)
    (home / ".deepagents" / "config.toml").write_text(
        '[models.providers.itest]\n'
        'class_path = "deepagents_code._testing_models:ToolCallingIntegrationChatModel"\n'
        'models = ["fake"]\n'
    )
    project = tmp_path / "project"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HOME=str(home), DEEPAGENTS_CODE_NO_UPDATE_CHECK="1")
    env["PATH"] = f"{Path(dcode_python).parent}:{env.get('PATH', '')}"
    with Sandbox.create(labels={"deepbox.test/python": "dcode"}, ttl=900, network="none") as sb:
        p = subprocess.run(
            ["dcode", "-n", "DCA_TEST_WRITE_FILE=/workspace/from-dcode.txt", "-M", "itest:fake",
             "--sandbox", "deepbox", "--sandbox-id", sb.id],
            cwd=project, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        )
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
        assert sb.read_text("/workspace/from-dcode.txt") == "auto-approved"
        assert sb.exec("true").ok  # an attached sandbox is not deleted by dcode
