"""Checks README.md's "Verified by" table against this run's results.

Usage: verified_by.py RESULTS_DIR   (python/run-tests.sh runs it last)

RESULTS_DIR holds ``pytest.xml`` (pytest's JUnit XML of python/tests) and,
when Harbor ran, ``harbor.json`` (tests/harbor/check_results.py). Each row
of the table (between the ``verified-by`` markers) names its suite, the
pinned version and the counts; every number must be what this run obtained,
and every version what is installed or pinned. A suite that did not run
here (a skip: no PyPI, no Python 3.12, no fake cluster) is reported and not
checked. Exits 1 on any disagreement, naming the row, the table's words and
the results.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PYTHON_README = REPO / "python" / "README.md"
STANDARD_CLASSES = ("TestControlStandard", "TestDeepboxStandard", "TestDeepboxWorkspaceStandard")
# python/README.md's words for an outcome, per column of its per-test table.
STANDARD_WORDS = {"passed": "pass", "xfailed": "expected failure", "failed": "FAIL", "skipped": "skipped"}


def junit_outcomes(path: Path) -> list[tuple[str, str, str]]:
    """(classname, name, outcome) per test case; outcome passed/failed/xfailed/skipped."""
    out = []
    for case in ET.parse(path).iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                break
            if child.tag == "skipped":
                outcome = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
        out.append((case.get("classname", ""), case.get("name", ""), outcome))
    return out


def counts(cases: list[tuple[str, str, str]], match) -> Counter[str] | None:
    """Outcome counts of the cases ``match(classname)`` selects; None if none of them ran."""
    c = Counter(outcome for cls, _, outcome in cases if match(cls))
    if c["passed"] + c["failed"] + c["xfailed"] == 0:
        return None
    return c


def table_rows() -> list[list[str]]:
    text = README.read_text(encoding="utf-8")
    m = re.search(r"<!-- verified-by -->(.*?)<!-- /verified-by -->", text, re.S)
    if not m:
        raise SystemExit("verified-by: README.md has no <!-- verified-by --> table")
    rows = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and not set(cells[0]) <= set("-: ") and cells[0] != "Suite":
            rows.append(cells)
    return rows


def number(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text)
    return int(m.group(1)) if m else None


def installed(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def standard_suite_problems(cases: list[tuple[str, str, str]]) -> list[str]:
    """python/README.md's per-test table of SandboxIntegrationTests against this run."""
    ran = {(cls.rsplit(".", 1)[-1], name): outcome for cls, name, outcome in cases
           if cls.rsplit(".", 1)[-1] in STANDARD_CLASSES}
    if not any(outcome != "skipped" for outcome in ran.values()):
        print("verified-by: python/README.md's SandboxIntegrationTests table: did not run here: not checked")
        return []
    text = PYTHON_README.read_text(encoding="utf-8")
    m = re.search(r"<!-- standard-suite-results -->(.*?)<!-- /standard-suite-results -->", text, re.S)
    if not m:
        return ["python/README.md has no <!-- standard-suite-results --> table"]
    problems = []
    listed = set()
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`test_"):
            continue
        name = cells[0].strip("`")
        listed.add(name)
        for cls, word in zip(STANDARD_CLASSES, cells[1:4]):
            outcome = ran.get((cls, name))
            actual = STANDARD_WORDS.get(outcome or "", "not run")
            if cls == "TestControlStandard" and outcome == "xfailed":
                actual = "fails"  # the control's failures are recorded, not excused
            if word != actual:
                problems.append(f"python/README.md: {name} under {cls}: the table says {word!r}, this run: {actual!r}")
    for name in sorted({n for _, n in ran} - listed):
        problems.append(f"python/README.md's SandboxIntegrationTests table lacks {name}")
    return problems


def main() -> int:
    results = Path(sys.argv[1])
    junit = results / "pytest.xml"
    cases = junit_outcomes(junit) if junit.is_file() else []
    problems: list[str] = []
    checked = 0

    def expect(row: str, what: str, table: object, actual: object) -> None:
        if table != actual:
            problems.append(f"{row}: the table says {what} {table}, this run: {actual}")

    def pytest_row(row: str, version_cell: str, result: str, dist: str, match) -> None:
        nonlocal checked
        c = counts(cases, match)
        if c is None:
            print(f"verified-by: {row}: did not run here (skipped): not checked")
            return
        checked += 1
        expect(row, "version", version_cell, installed(dist))
        expect(row, "passed", number(r"(\d+) passed", result), c["passed"])
        expect(row, "expected failures", number(r"(\d+) expected failures?", result) or 0, c["xfailed"])
        if c["failed"]:
            problems.append(f"{row}: {c['failed']} failed in this run")

    problems += standard_suite_problems(cases)
    rows = table_rows()
    for suite, version, result in rows:
        if "SandboxIntegrationTests" in suite:
            pytest_row(suite, version, result, "langchain-tests",
                       lambda cls: cls.endswith(("TestDeepboxStandard", "TestDeepboxWorkspaceStandard")))
        elif "provider contract" in suite:
            pytest_row(suite, version, result, "langchain-tests", lambda cls: "test_provider_contract" in cls)
        elif "k8s-agent-sandbox" in suite:
            pytest_row(suite, version, result, "k8s-agent-sandbox", lambda cls: "test_k8s_agent_sandbox" in cls)
        elif "Harbor" in suite:
            path = results / "harbor.json"
            if not path.is_file():
                print(f"verified-by: {suite}: did not run here (skipped): not checked")
                continue
            checked += 1
            h = json.loads(path.read_text())
            expect(suite, "version", version, h.get("harbor_version"))
            expect(suite, "tasks", number(r"(\d+) tasks", result), h["tasks"])
            expect(suite, "reference solutions that pass", number(r"(\d+) reference solutions? pass", result),
                   h["expected_pass"])
            expect(suite, "broken solutions that fail", number(r"(\d+) broken solutions? fail", result),
                   h["expected_fail"])
            if h["not_as_expected"]:
                problems.append(f"{suite}: {h['not_as_expected']} tasks did not end as expected in this run")
        elif "MCP conformance" in suite:
            checked += 1
            script = (REPO / "scripts" / "mcp-conformance.sh").read_text()
            m = re.search(r"^conformance_version=(\S+)", script, re.M)
            expect(suite, "version", version, m.group(1) if m else None)
            baseline = (REPO / "tests" / "mcp-conformance" / "baseline.yml").read_text()
            sections: dict[str, int] = {}
            current = None
            for line in baseline.splitlines():
                if re.match(r"^[a-z]+:\s*$", line):
                    current = line.rstrip(":\n ")
                    sections[current] = 0
                elif current and re.match(r"^\s+-\s+\S", line):
                    sections[current] += 1
            expect(suite, "server expected failures", number(r"(\d+) server", result), sections.get("server", 0))
            expect(suite, "client expected failures", number(r"(\d+) client", result), sections.get("client", 0))
        else:
            problems.append(f"{suite}: a row this check does not know (python/verified_by.py)")

    for p in problems:
        print(f"verified-by: MISMATCH: {p}")
    print(f"verified-by: README.md's table: {len(rows)} rows, {checked} checked against this run, "
          f"{len(problems)} disagreements")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
