"""deepbox.Sandbox / DaemonClient on real local sandboxes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest

from deepbox import (
    AsyncSandbox,
    CLIError,
    DaemonClient,
    DaemonUnavailableError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    Sandbox,
    SandboxNotFoundError,
)

LABEL = {"deepbox.test/python": "sandbox"}


def test_create_labels_ttl_attach_delete(deepbox_bin: str) -> None:
    sb = Sandbox.create(labels={**LABEL, "team": "ml"}, ttl=900, network="none")
    try:
        assert sb.id.startswith("sb-")
        assert sb.meta["labels"]["team"] == "ml"
        assert sb.meta["expires_at"]  # a TTL was set
        assert sb.client.root == "/workspace"
        same = Sandbox.attach(sb.id)
        assert same.exec("echo $((6*7))").stdout == b"42\n"
        same.__exit__(None, None, None)  # attached, not owned: not deleted
        assert sb.exec("true").ok
    finally:
        sb.delete()
    sb.delete()  # idempotent
    with pytest.raises(DaemonUnavailableError):
        sb.exec("true")
    with pytest.raises(SandboxNotFoundError) as e:
        Sandbox.attach(sb.id)
    assert e.value.exit_code == 3


def test_suspend_and_pause_keep_the_files_and_use_wakes(deepbox_bin: str) -> None:
    with Sandbox.create(labels=LABEL, ttl=900, network="none") as sb:
        sb.write("keep.txt", b"\x00kept\xff")
        sb.suspend()
        assert sb.state == "suspended"
        # The next call resumes it: fresh processes, the same files.
        assert sb.read_bytes("keep.txt") == b"\x00kept\xff"
        assert sb.state == "running"
        try:
            sb.pause()
        except CLIError as e:  # a host without a cgroup freezer (e.g. not root) says so
            assert "no cgroup freezer" in e.message
        else:
            assert sb.state == "paused"
            assert sb.exec("cat keep.txt").stdout == b"\x00kept\xff"
            assert sb.state == "running"
        sb.resume()  # a running sandbox: nothing to do
        assert sb.exec("true").ok


def test_snapshot_restore_and_fork(deepbox_bin: str) -> None:
    name = f"py-{os.getpid()}"
    with Sandbox.create(labels=LABEL, ttl=900, network="none") as sb:
        sb.write("dir/notes.txt", "v1\n")
        record = sb.snapshot(name)
        assert record["name"] == name and record["source_id"] == sb.id
        with Sandbox.create(labels=LABEL, ttl=900, network="none", name=f"named-{os.getpid()}") as named:
            assert Sandbox.attach(f"named-{os.getpid()}").id == named.id
        sb.write("dir/notes.txt", "v2\n")
        forks = sb.fork(2, ttl=900)
        try:
            assert [f.read_text("dir/notes.txt") for f in forks] == ["v2\n", "v2\n"]
            forks[0].write("dir/notes.txt", "mine\n")
            assert forks[1].read_text("dir/notes.txt") == "v2\n"
        finally:
            for f in forks:
                f.delete()
    try:
        assert name in [s["name"] for s in Sandbox.snapshots()]
        with Sandbox.create(labels=LABEL, ttl=900, network="none", from_snapshot=name) as restored:
            assert restored.read_text("dir/notes.txt") == "v1\n"
    finally:
        Sandbox.delete_snapshot(name)
    assert name not in [s["name"] for s in Sandbox.snapshots()]


def test_context_manager_deletes(deepbox_bin: str) -> None:
    with Sandbox.create(labels=LABEL, ttl=900, network="none") as sb:
        sid = sb.id
    out = subprocess.run([deepbox_bin, "sandbox", "ls", "--json"], capture_output=True, text=True, check=True)
    assert sid not in [m["id"] for m in json.loads(out.stdout)]


def test_ttl_expires(deepbox_bin: str) -> None:
    sb = Sandbox.create(labels=LABEL, ttl=1, network="none")
    # The supervisor deletes it; wait for that by polling (bounded), never by timing.
    for _ in range(600):
        try:
            Sandbox.attach(sb.id)
        except SandboxNotFoundError:
            break
        subprocess.run(["sleep", "0.1"])
    else:
        pytest.fail("a sandbox with ttl=1 still exists after 60 s")
    with pytest.raises(DaemonUnavailableError):
        sb.exec("true")


def test_cli_errors_carry_message_and_exit_code(deepbox_bin: str) -> None:
    with pytest.raises(CLIError) as e:
        Sandbox.create(labels={"bad label": "x"}, ttl=10)
    assert e.value.exit_code == 2
    assert "label" in e.value.message
    with pytest.raises(SandboxNotFoundError):
        Sandbox.attach("sb-000000000000")


def test_provider_settings_are_the_clis_own_flags(deepbox_bin: str) -> None:
    # The local provider's settings, by the names deepbox declares them with.
    sb = Sandbox.create(labels=LABEL, ttl=120, network="none", settings={"memory": "64M", "max-processes": 64})
    try:
        assert sb.meta["limits"]["memory_bytes"] == 64 << 20
        assert sb.meta["limits"]["max_processes"] == 64
    finally:
        sb.delete()
    # A setting of another provider, or none at all, is the CLI's usage error.
    with pytest.raises(CLIError) as e:
        Sandbox.create(labels=LABEL, ttl=10, settings={"warm-pool": "x"})
    assert e.value.exit_code == 2
    assert "--warm-pool: a setting of the k8s provider" in e.value.message
    with pytest.raises(CLIError) as e:
        Sandbox.create(labels=LABEL, ttl=10, settings={"colour": "red"})
    assert e.value.exit_code == 2
    with pytest.raises(ValueError):
        Sandbox.create(settings={"--memory": "1G"})
    with pytest.raises(ValueError, match="router_token"):
        Sandbox.claim(settings={"router-token": "secret"})


def test_dead_daemon(tmp_path) -> None:
    client = DaemonClient(str(tmp_path / "no.sock"))
    with pytest.raises(DaemonUnavailableError):
        client.exec("true")
    with pytest.raises(DaemonUnavailableError):
        client.stat("/workspace")


def test_exec_argv_shell_cwd_env_stdin(sandbox: Sandbox) -> None:
    sandbox.mkdir("/workspace/sub")
    r = sandbox.exec(["sh", "-c", 'printf "%s|%s|" "$PWD" "$X"; cat'], cwd="/workspace/sub", env={"X": "y z"}, stdin=b"in\x00put")
    assert r.ok and r.stdout == b"/workspace/sub|y z|in\x00put"
    r = sandbox.exec("echo out; echo err >&2; exit 7")
    assert (r.status, r.exit_code, r.returncode) == ("exited", 7, 7)
    assert r.stdout == b"out\n" and r.stderr == b"err\n"
    assert sorted(r.output.splitlines()) == [b"err", b"out"]
    r = sandbox.exec(["/no/such/binary"])
    assert r.status == "spawn_failed" and r.returncode == 127 and r.error
    r = sandbox.exec("kill -9 $$")
    assert r.status == "signaled" and r.returncode == 137


def test_exec_binary_output_is_exact(sandbox: Sandbox) -> None:
    r = sandbox.exec(["python3", "-c", "import sys; sys.stdout.buffer.write(bytes(range(256)))"])
    assert r.stdout == bytes(range(256))


def test_exec_timeout(sandbox: Sandbox) -> None:
    r = sandbox.exec("echo started; sleep 60", timeout=0.5)
    assert r.status == "timed_out" and r.returncode == 124
    assert r.stdout == b"started\n"


def test_exec_output_cap(sandbox: Sandbox) -> None:
    r = sandbox.exec("head -c 100000 /dev/zero", max_output_bytes=1000)
    assert r.ok and len(r.stdout) == 1000 and r.stdout_truncated and r.truncated


def test_exec_streams_output_before_the_command_ends(sandbox: Sandbox) -> None:
    # The command prints, then waits for a file that only the consumer creates
    # after seeing that output: it can only finish if the output was streamed.
    sandbox.remove("/workspace/go", recursive=True) if sandbox.exists("/workspace/go") else None
    script = "echo first; while [ ! -e /workspace/go ]; do sleep 0.05; done; echo second >&2"
    seen: list[tuple[str, bytes]] = []
    for ev in sandbox.exec_stream(script, timeout=60):
        if ev.type == "exit":
            assert ev.result is not None and ev.result.ok
            break
        seen.append((ev.type, ev.data))
        if ev.data == b"first\n":
            sandbox.write("/workspace/go", b"")
    assert seen == [("stdout", b"first\n"), ("stderr", b"second\n")]

    chunks: list[bytes] = []
    sandbox.remove("/workspace/go")
    r = sandbox.exec(
        script,
        timeout=60,
        on_output=lambda stream, data: (chunks.append(data), sandbox.write("/workspace/go", b"")),
    )
    assert r.ok and chunks == [b"first\n", b"second\n"]


def test_exec_stream_abandoned_kills_the_command(sandbox: Sandbox) -> None:
    gen = sandbox.exec_stream("echo $$ > /workspace/pid; echo up; sleep 600")
    for ev in gen:
        if ev.data == b"up\n":
            break
    gen.close()  # drops the connection
    pid = sandbox.read_text("/workspace/pid").strip()
    for _ in range(600):
        if not sandbox.exec(["kill", "-0", pid]).ok:
            break
        subprocess.run(["sleep", "0.1"])
    else:
        pytest.fail("the abandoned command still runs after 60 s")


def test_files(sandbox: Sandbox) -> None:
    base = "/workspace/files"
    assert sandbox.write(f"{base}/a/b.txt", "one\ntwo\r\nthree") == 14
    info = sandbox.stat(f"{base}/a/b.txt")
    assert (info.type, info.size, info.mode) == ("file", 14, "0644")
    assert [e.name for e in sandbox.ls(f"{base}/a")] == ["b.txt"]
    assert sandbox.ls(base)[0].is_dir
    r = sandbox.read(f"{base}/a/b.txt", offset=1, limit=1)
    assert (r.content, r.total_lines, r.more_lines) == ("two", 3, True)
    assert sandbox.read_text(f"{base}/a/b.txt") == "one\ntwo\r\nthree"
    assert sandbox.edit(f"{base}/a/b.txt", "two", "2") == 1
    with pytest.raises(NotFoundError):
        sandbox.edit(f"{base}/a/b.txt", "absent", "x")
    assert sandbox.glob("*.txt", base) == ([f"{base}/a/b.txt"], False)
    g = sandbox.grep("thr", base)
    assert [(m.path, m.line, m.text) for m in g.matches] == [(f"{base}/a/b.txt", 3, "three")]
    assert sandbox.grep("t.+e", base, regex=True).matches[0].line == 3
    with pytest.raises(NotFoundError):
        sandbox.stat(f"{base}/missing")
    with pytest.raises(NotFoundError):
        sandbox.read_bytes(f"{base}/missing")
    with pytest.raises(PermissionDeniedError):
        sandbox.stat("/proc/self/environ")  # kernel interfaces: not served by the file API
    with pytest.raises(InvalidArgumentError):
        sandbox.read_bytes(base)  # a directory
    sandbox.remove(base, recursive=True)
    assert not sandbox.exists(base)


def test_binary_non_utf8_and_huge_files(sandbox: Sandbox) -> None:
    blob = bytes(range(256)) * 3
    sandbox.write("/workspace/blob.bin", blob)
    r = sandbox.read("/workspace/blob.bin")
    assert r.binary
    assert sandbox.read_bytes("/workspace/blob.bin") == blob
    assert sandbox.read("/workspace/blob.bin", binary=True).data == blob
    latin = "café\n".encode("latin-1")
    sandbox.write("/workspace/latin.txt", latin)
    assert sandbox.read_bytes("/workspace/latin.txt") == latin
    assert sandbox.read("/workspace/latin.txt").binary
    # 40 MiB, streamed both ways in chunks (never one buffer on the way in).
    chunk = os.urandom(1 << 20)
    assert sandbox.write("/workspace/huge.bin", (chunk for _ in range(40))) == 40 << 20
    total = sum(len(part) for part in sandbox.client.download_stream("/workspace/huge.bin"))
    assert total == 40 << 20
    assert sandbox.read_bytes("/workspace/huge.bin")[-(1 << 20) :] == chunk


def test_upload_download_many(sandbox: Sandbox) -> None:
    res = sandbox.upload_many([("/workspace/m/1", b"1"), ("/etc/x", b"no"), ("/workspace/m/2", b"2")])
    assert res[0] is None and res[2] is None and isinstance(res[1], PermissionDeniedError)
    got = sandbox.download_many(["/workspace/m/2", "/workspace/m/none", "/workspace/m/1"])
    assert got[0] == b"2" and isinstance(got[1], NotFoundError) and got[2] == b"1"


def test_async_forms(deepbox_bin: str) -> None:
    async def main() -> None:
        async with await AsyncSandbox.create(labels=LABEL, ttl=900, network="none") as sb:
            await sb.write("/workspace/x.txt", "hi")
            assert await sb.read_text("/workspace/x.txt") == "hi"
            results = await asyncio.gather(*(sb.exec(["echo", str(i)]) for i in range(5)))
            assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(5)]
            events = [ev async for ev in sb.exec_stream("echo a; echo b >&2")]
            assert [e.type for e in events] == ["stdout", "stderr", "exit"]
            sid = sb.id
        with pytest.raises(SandboxNotFoundError):
            await AsyncSandbox.attach(sid)

    asyncio.run(main())


def test_create_image_is_passed_to_the_cli_and_its_errors_come_back(deepbox_bin: str) -> None:
    # With --rootfs it is a usage error; an image no registry serves fails
    # naming it, and leaves no sandbox (the happy path: tests/local/image_test.cc).
    with pytest.raises(CLIError) as e:
        Sandbox.create(labels=LABEL, ttl=60, network="none", image="python:3.12-slim-bookworm", rootfs="/")
    assert e.value.exit_code == 2
    assert "--rootfs" in e.value.message
    with pytest.raises(CLIError) as unreachable:
        Sandbox.create(labels=LABEL, ttl=60, network="none", image="127.0.0.1:1/nothing/here:v1")
    assert "127.0.0.1:1/nothing/here:v1" in unreachable.value.message
    listed = subprocess.run(
        [deepbox_bin, "sandbox", "ls", "-q", "--selector", "deepbox.test/python=sandbox"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout == ""
