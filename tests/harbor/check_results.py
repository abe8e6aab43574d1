"""Checks a Harbor job over tests/harbor/tasks against each task's expectation.

Usage: check_results.py TASKS_DIR JOB_DIR [SUMMARY_JSON]

Every task's task.toml says ``deepbox_expect = "pass"`` (its reference
solution must earn reward 1.0 with no exception) or ``"fail"`` (a
deliberately broken solution, an offline download, a timeout: reward below
1.0 or an exception). Prints one line per trial and Harbor's summary line;
exits 1 when any trial disagrees or any task has no trial. SUMMARY_JSON
gets the counts (read by python/verified_by.py).
"""

from __future__ import annotations

import json
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path


def main() -> int:
    tasks_dir, job_dir = Path(sys.argv[1]), Path(sys.argv[2])
    summary_path = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    expect = {}
    for toml in sorted(tasks_dir.glob("*/task.toml")):
        meta = tomllib.loads(toml.read_text()).get("metadata", {})
        expect[toml.parent.name] = meta.get("deepbox_expect")
        if expect[toml.parent.name] not in ("pass", "fail"):
            print(f"harbor: {toml}: metadata.deepbox_expect must be pass or fail")
            return 1
    seen: dict[str, str] = {}
    bad = 0
    for result in sorted(job_dir.glob("*/result.json")):
        r = json.loads(result.read_text())
        name = r.get("task_name")
        if name not in expect:
            continue
        reward = ((r.get("verifier_result") or {}).get("rewards") or {}).get("reward")
        exc = (r.get("exception_info") or {}).get("exception_type")
        passed = reward == 1.0 and exc is None
        outcome = "pass" if passed else "fail"
        ok = outcome == expect[name]
        bad += not ok
        seen[name] = outcome
        print(
            f"harbor: {name}: reward {reward}{f', {exc}' if exc else ''} -> {outcome} "
            f"({'as expected' if ok else 'EXPECTED ' + expect[name].upper()})"
        )
    missing = sorted(set(expect) - set(seen))
    for name in missing:
        print(f"harbor: {name}: no trial result in {job_dir}")
    n_pass = sum(1 for v in expect.values() if v == "pass")
    n_fail = len(expect) - n_pass
    agree = len(expect) - bad - len(missing)
    print(
        f"harbor oracle: {len(expect)} tasks, {agree} as expected "
        f"({n_pass} reference solutions pass, {n_fail} broken ones fail), "
        f"{bad + len(missing)} not"
    )
    if summary_path:
        summary_path.write_text(
            json.dumps({
                "harbor_version": version("harbor"),
                "tasks": len(expect),
                "expected_pass": n_pass,
                "expected_fail": n_fail,
                "as_expected": agree,
                "not_as_expected": bad + len(missing),
            })
        )
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main())
