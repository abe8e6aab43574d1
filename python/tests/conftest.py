"""Fixtures: real local sandboxes made by the real ``deepbox`` binary.

The binaries come from ``$DEEPBOX_BIN`` (and ``$DEEPBOX_SANDBOXD``), else
from ``$DEEPBOX_BUILD_DIR/bin``, else from ``build/dev/bin`` of this
checkout. Sandbox state lives in a private directory per test session
(``$DEEPBOX_STATE_DIR``), so sessions never see each other's sandboxes.
"""

from __future__ import annotations

import os
import subprocess
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _find_bin() -> Path | None:
    if os.environ.get("DEEPBOX_BIN"):
        return Path(os.environ["DEEPBOX_BIN"])
    for d in (os.environ.get("DEEPBOX_BUILD_DIR"), str(REPO / "build" / "dev")):
        if d and (Path(d) / "bin" / "deepbox").is_file():
            return Path(d) / "bin" / "deepbox"
    return None


_BIN = _find_bin()
_STATE = tempfile.mkdtemp(prefix="deepbox-pytest-state-")
_WHY_NOT: str | None = None
if _BIN is None:
    _WHY_NOT = "the deepbox binary was not found (set DEEPBOX_BIN or DEEPBOX_BUILD_DIR, or build build/dev)"
else:
    os.environ["DEEPBOX_BIN"] = str(_BIN)
    os.environ["DEEPBOX_STATE_DIR"] = _STATE
    # The key of the Kubernetes claims' daemon tokens: the session's, not the user's.
    os.environ["DEEPBOX_K8S_CLAIM_KEY_FILE"] = os.path.join(_STATE, "k8s-claim-key")
    if not os.environ.get("DEEPBOX_SANDBOXD") and (_BIN.parent / "deepbox-sandboxd").is_file():
        os.environ["DEEPBOX_SANDBOXD"] = str(_BIN.parent / "deepbox-sandboxd")
    _doctor = subprocess.run([str(_BIN), "doctor"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if _doctor.returncode != 0:
        _WHY_NOT = f"this host cannot run deepbox sandboxes (deepbox doctor exited {_doctor.returncode})"


def require_sandboxes() -> None:
    if _WHY_NOT is not None:
        pytest.skip(_WHY_NOT)


@pytest.fixture(scope="session")
def deepbox_bin() -> str:
    require_sandboxes()
    return str(_BIN)


@pytest.fixture(scope="session")
def sandbox(deepbox_bin: str) -> Iterator[object]:
    """One sandbox shared by the tests that only need somewhere to run."""
    from deepbox import Sandbox

    sb = Sandbox.create(labels={"deepbox.test/python": "true"}, ttl=1800, network="none")
    try:
        yield sb
    finally:
        sb.delete()


# The standard suite (test_standard.py): test name -> (exception type, file,
# line) of the control backend's failure; the DeepboxSandbox failures excused
# because the control failed the same test at the same assertion.
CONTROL_FAILURES: dict[str, tuple[str, str, int]] = {}
CONTROL_RAN: set[str] = set()
EXCUSED: set[tuple[str, str]] = set()
_STANDARD_CLASSES = ("TestControlStandard", "TestDeepboxStandard", "TestDeepboxWorkspaceStandard")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    cls = item.cls.__name__ if item.cls else ""
    if report.when != "call" or cls not in _STANDARD_CLASSES:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    where = None
    if call.excinfo is not None:
        tb = call.excinfo.traceback
        # The suite's own frame (its assertion), not a helper's.
        frames = [e for e in tb if "langchain_tests" in str(e.path)]
        entry = frames[-1] if frames else tb[-1]
        where = (call.excinfo.typename, Path(str(entry.path)).name, entry.lineno)
    if cls == "TestControlStandard":
        CONTROL_RAN.add(item.name)
        if report.failed and where is not None:
            CONTROL_FAILURES[item.name] = where
            # The control is a yardstick: its failures are recorded, not failures of this run.
            report.outcome = "skipped"
            report.wasxfail = f"control backend: recorded for comparison ({where[0]} at {where[1]}:{where[2]})"
        return
    if report.failed and where is not None and CONTROL_FAILURES.get(item.name) == where:
        report.outcome = "skipped"
        report.wasxfail = f"fails the same way on the control backend ({where[0]} at {where[1]}:{where[2]})" + (
            f": {crash.message[:200]}" if crash else ""
        )
        EXCUSED.add((cls, item.name))



def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Nothing may outlive the session: remove any sandbox a failed test left.
    if _BIN is not None and _WHY_NOT is None:
        # deepagents-code/sandbox: the label of sandboxes dcode's provider made.
        for selector in ("deepbox.test/python", "deepagents-code/sandbox"):
            subprocess.run(
                [str(_BIN), "sandbox", "rm", "--selector", selector],
                capture_output=True,
                stdin=subprocess.DEVNULL,
            )
    shutil.rmtree(_STATE, ignore_errors=True)
