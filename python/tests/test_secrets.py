"""Secrets and the live network policy through the package (issue 26).

No packet leaves the sandbox here: the traffic itself is tested in C++
(src/local/secrets_proxy_test.cc, in a network namespace of its own).
"""

from __future__ import annotations

import os
import secrets as pysecrets

import pytest

from deepbox import CLIError, Sandbox, Secret
from deepbox.sandbox import _secret_args


def test_secret_args_never_put_a_value_on_the_command_line() -> None:
    args, env = _secret_args(
        {
            "A": Secret(hosts=["api.example.test"], value="v4lue"),
            "B": Secret(hosts="b.example.test", env="HOME_TOKEN"),
            "C": Secret(hosts=["c.example.test", "*.c.example.test"], file="/run/c"),
            "D": Secret(hosts=["d.example.test"], command="pass show d", in_query=True),
        }
    )
    assert args == [
        "--secret", "A=env:DEEPBOX_PY_SECRET_0@api.example.test",
        "--secret", "B=env:HOME_TOKEN@b.example.test",
        "--secret", "C=file:/run/c@c.example.test,*.c.example.test",
        "--secret", "D=cmd:pass show d@d.example.test;query",
    ]  # fmt: skip
    assert env == {"DEEPBOX_PY_SECRET_0": "v4lue"}
    assert "v4lue" not in " ".join(args)
    with pytest.raises(ValueError, match="exactly one of"):
        _secret_args({"X": Secret(hosts=["x.test"], value="a", env="B")})
    with pytest.raises(ValueError, match="no hosts"):
        _secret_args({"X": Secret(hosts=[], value="a")})


def test_secret_placeholder_live_policy_and_log(deepbox_bin: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("an allow= sandbox needs nft in its network namespace: root here")
    value = "s3cr3t-" + pysecrets.token_hex(20)
    with Sandbox.create(
        network="allow=api.example.test",
        secrets={"API_TOKEN": Secret(hosts=["api.example.test"], value=value)},
        cold=True,
        deepbox_bin=deepbox_bin,
    ) as sb:
        out = sb.exec("echo $API_TOKEN").stdout.decode()
        assert out.startswith("deepbox-secret-")
        assert value not in out
        assert sb.set_network(allow=["+pypi.org"]) == "allow=api.example.test,pypi.org"
        assert sb.set_network(mode="none") == "none"
        with pytest.raises(CLIError, match="cannot change to 'public'"):
            sb.set_network(mode="public")
        log = sb.network_log()
        assert [e["event"] for e in log] == ["policy", "policy"]
        assert "none (was allow=api.example.test,pypi.org" in log[-1]["rule"]
        assert all(value not in str(e) for e in log)
        assert len(sb.network_log(tail=1)) == 1
