"""DeepboxSandbox (native file API) against deepagents' stock BaseSandbox on the same sandbox."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator

import pytest

pytest.importorskip("deepagents")

from deepagents.backends.protocol import ExecuteResponse, FileDownloadResponse, FileUploadResponse  # noqa: E402
from deepagents.backends.sandbox import BaseSandbox  # noqa: E402

from deepbox import Sandbox  # noqa: E402
from deepbox.deepagents import DeepboxSandbox  # noqa: E402

B = "/workspace/parity"


class StockSandbox(BaseSandbox):
    """deepagents' stock path on the same sandbox: only execute/upload/download are deepbox's."""

    def __init__(self, native: DeepboxSandbox) -> None:
        self._n = native

    @property
    def id(self) -> str:
        return self._n.id

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        return self._n.execute(command, timeout=timeout)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return self._n.upload_files(files)

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return self._n.download_files(paths)


@pytest.fixture(scope="module")
def pair(sandbox: Sandbox) -> Iterator[tuple[DeepboxSandbox, StockSandbox]]:
    native = DeepboxSandbox(sandbox)
    stock = StockSandbox(native)
    files = {
        "a.py": "print('a')\n",
        "sub/b.py": "import os\nTODO = 1\n",
        "sub/nested/c.py": "x = 'TODO'\n# TODO twice\n",
        "readme.md": "# readme\nTODO: write\n",
        ".hidden.py": "h = 1\n",
        ".hidden/x.py": "TODO hidden\n",
        ".github/workflows/ci.yml": "on: push\n",
        ".git/config": "TODO in git\n",
        "crlf.txt": "one\r\ntwo\r\nthree\r\n",
        "empty.txt": "",
        "lines.txt": "\n".join(f"line {i}" for i in range(1, 251)),
        "nul.txt": "a\x00b\nc\n",
        "unicode.txt": "héllo wörld\n世界\n",
        "image.png": base64.b64encode(b"\x89PNG" + bytes(range(256))).decode(),
    }
    native.upload_files([(f"{B}/{k}", v.encode("utf-8")) for k, v in files.items()])
    native.upload_files([(f"{B}/latin1.txt", "café\n".encode("latin-1")), (f"{B}/bin.dat", bytes(range(256)) * 4)])
    native.upload_files([(f"{B}/pic.png", bytes(range(256)))])
    yield native, stock
    native.delete(B)


READS = [
    ("lines.txt", 0, 100),
    ("lines.txt", 240, 100),
    ("lines.txt", 250, 10),
    ("lines.txt", 300, 10),
    ("lines.txt", -5, 3),
    ("lines.txt", 10, 0),
    ("crlf.txt", 0, 2000),
    ("empty.txt", 0, 2000),
    ("empty.txt", 0, 0),
    ("nul.txt", 0, 2000),
    ("unicode.txt", 1, 1),
    ("latin1.txt", 0, 2000),
    ("bin.dat", 0, 2000),
    ("pic.png", 0, 2000),
    ("missing.txt", 0, 2000),
    ("sub", 0, 2000),
]


@pytest.mark.parametrize(("name", "offset", "limit"), READS)
def test_read_matches_stock(pair, name: str, offset: int, limit: int) -> None:
    native, stock = pair
    assert native.read(f"{B}/{name}", offset, limit) == stock.read(f"{B}/{name}", offset, limit)


def test_read_huge_line_truncates_like_stock(pair) -> None:
    native, stock = pair
    native.write(f"{B}/huge.txt", "short\n" + "y" * 700_000 + "\nend\n")
    for off in (0, 1, 2):
        assert native.read(f"{B}/huge.txt", off, 10) == stock.read(f"{B}/huge.txt", off, 10)
    native.upload_files([(f"{B}/big.png", bytes(600_000))])
    assert native.read(f"{B}/big.png") == stock.read(f"{B}/big.png")


@pytest.mark.parametrize("path", [f"{B}/sub", f"{B}/", f"{B}/missing", f"{B}/a.py"])
def test_ls_matches_stock(pair, path: str) -> None:
    native, stock = pair
    n, s = native.ls(path), stock.ls(path)
    assert n.error == s.error
    key = lambda e: e["path"]  # noqa: E731
    assert [(e["path"], e["is_dir"]) for e in sorted(n.entries or [], key=key)] == [
        (e["path"], e["is_dir"]) for e in sorted(s.entries or [], key=key)
    ]


GLOBS = ["*.py", "**/*.py", "sub/**/*.py", "/*.py", "a.py/**", "*.yml", "**/*.yml", ".*.py", "*", "?.py", "[^a].py", "[!a].py", "{a,c}.py"]


@pytest.mark.parametrize("pattern", GLOBS)
def test_glob_matches_stock(pair, pattern: str) -> None:
    native, stock = pair
    n, s = native.glob(pattern, B), stock.glob(pattern, B)
    assert (n.error, sorted(m["path"] for m in n.matches or [])) == (s.error, sorted(m["path"] for m in s.matches or []))


GREPS = [("TODO", None), ("TODO", "*.py"), ("TODO", "sub/**/*.py"), ("import os", "*.py"), ("nothing here", None), ("two", None), ("世界", None)]


@pytest.mark.parametrize(("pattern", "glob"), GREPS)
def test_grep_matches_stock(pair, pattern: str, glob: str | None) -> None:
    native, stock = pair
    n, s = native.grep(pattern, B, glob), stock.grep(pattern, B, glob)
    key = lambda m: (m["path"], m["line"])  # noqa: E731
    assert n.error == s.error
    # The daemon drops a line's "\r" terminator (CRLF files); GNU grep keeps it.
    stock = [{**m, "text": m["text"].removesuffix("\r")} for m in s.matches or []]
    assert sorted(n.matches or [], key=key) == sorted(stock, key=key)


def test_grep_max_count(pair) -> None:
    native, stock = pair
    for cap in (1, 3, 100):
        n, s = native.grep("TODO", B, max_count=cap), stock.grep("TODO", B, max_count=cap)
        assert (len(n.matches), n.truncated) == (len(s.matches), s.truncated)


EDITS = [
    ("one\ntwo\n", "two", "2", False),
    ("x x x\n", "x", "y", False),
    ("x x x\n", "x", "y", True),
    ("abc\n", "zzz", "y", False),
    ("a\r\nb\r\nc\r\n", "a\nb\n", "A\nB\n", False),
    ("price $1 [a-z]*\n", "$1 [a-z]*", "$2", False),
    ("abc\n", "", "y", False),
]


@pytest.mark.parametrize(("content", "old", "new", "replace_all"), EDITS)
def test_edit_matches_stock(pair, content: str, old: str, new: str, replace_all: bool) -> None:
    native, stock = pair
    results, after = [], []
    for backend in (native, stock):
        native.upload_files([(f"{B}/edit.txt", content.encode())])
        results.append(backend.edit(f"{B}/edit.txt", old, new, replace_all))
        after.append(native.download_files([f"{B}/edit.txt"])[0].content)
    assert results[0] == results[1]
    assert after[0] == after[1]


def test_edit_errors_match_stock(pair) -> None:
    native, stock = pair
    for path in (f"{B}/missing.txt", f"{B}/sub", f"{B}/latin1.txt"):
        assert native.edit(path, "a", "b") == stock.edit(path, "a", "b")


def test_write_delete_match_stock(pair) -> None:
    native, stock = pair
    for backend in (native, stock):
        assert backend.write(f"{B}/w/deep/f.txt", "content") .error is None
        assert native.download_files([f"{B}/w/deep/f.txt"])[0].content == b"content"
        assert backend.write(f"{B}/w/deep/f.txt", "again").error is None  # overwrite (0.7)
        assert backend.delete(f"{B}/w").path == f"{B}/w"
        assert backend.delete(f"{B}/w").error == f"Error: '{B}/w' not found"
    assert native.write(f"{B}/a.py/x", "no").error is not None


def test_transfers_errors(pair) -> None:
    native, _ = pair
    got = native.download_files([f"{B}/missing", f"{B}/sub", "relative", f"{B}/a.py", "/tmp/absent"])
    assert [r.error for r in got] == ["file_not_found", "is_directory", "invalid_path", None, "file_not_found"]
    up = native.upload_files([("rel", b"x"), (f"{B}/sub", b"x"), ("/proc/x/y", b"x"), ("/tmp/u/v.bin", bytes(range(256)))])
    assert up[0].error == "invalid_path" and up[1].error == "is_directory" and up[2].error is not None and up[3].error is None
    assert native.download_files(["/tmp/u/v.bin"])[0].content == bytes(range(256))


def test_default_search_root_is_the_workspace(pair) -> None:
    native, _ = pair
    assert f"{B}/a.py" in [m["path"] for m in native.glob("a.py").matches]
    assert any(m["path"] == f"{B}/sub/b.py" for m in native.grep("import os").matches)


def test_async_twins(pair) -> None:
    native, stock = pair

    async def run() -> None:
        assert await native.aread(f"{B}/lines.txt", 5, 5) == stock.read(f"{B}/lines.txt", 5, 5)
        assert (await native.als(f"{B}/sub")).error is None
        assert (await native.aglob("*.py", B)).matches
        assert (await native.agrep("TODO", B)).matches
        assert (await native.awrite(f"{B}/as.txt", "x")).error is None
        assert (await native.aedit(f"{B}/as.txt", "x", "y")).occurrences == 1
        assert (await native.adownload_files([f"{B}/as.txt"]))[0].content == b"y"
        assert (await native.adelete(f"{B}/as.txt")).error is None
        r = await native.aexecute("echo hi", timeout=10)
        assert (r.output, r.exit_code) == ("hi\n", 0)

    asyncio.run(run())


def test_execute(pair) -> None:
    native, _ = pair
    r = native.execute("echo out; echo err >&2; exit 3")
    assert r.exit_code == 3 and "out" in r.output and "err" in r.output and not r.truncated
    r = native.execute("sleep 30", timeout=1)
    assert r.exit_code == 124 and "timed out" in r.output
    r = native.execute("head -c 2000000 /dev/zero | tr '\\0' x")
    assert r.truncated and len(r.output) == 1 << 20


def test_no_file_operation_starts_a_process(pair) -> None:
    native, _ = pair
    calls: list[str] = []
    orig = native.client.exec
    native.client.exec = lambda *a, **k: calls.append(str(a[0])) or orig(*a, **k)  # type: ignore[method-assign]
    try:
        native.ls(B)
        native.read(f"{B}/lines.txt")
        native.read(f"{B}/pic.png")
        native.read(f"{B}/nul.txt")
        native.write(f"{B}/np.txt", "x")
        native.edit(f"{B}/np.txt", "x", "y")
        native.grep("TODO", B, "*.py")
        native.glob("**/*.py", B)
        native.upload_files([(f"{B}/np2.txt", b"1")])
        native.download_files([f"{B}/np2.txt"])
        native.delete(f"{B}/np.txt")
    finally:
        native.client.exec = orig  # type: ignore[method-assign]
    assert calls == []


def test_large_tool_results_are_evicted_to_a_writable_root(pair) -> None:
    from deepagents import create_deep_agent
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class Model(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "test"

        def bind_tools(self, tools, **kwargs):
            return self

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            if not any(isinstance(m, ToolMessage) for m in messages):
                call = {"name": "execute", "args": {"command": "seq 1 100000"}, "id": "call_big.1", "type": "tool_call"}
                return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=[call]))])
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="done"))])

    native, _ = pair
    assert native.artifacts_root == "/workspace/.deepagents"
    agent = create_deep_agent(model=Model(), backend=native)
    result = agent.invoke({"messages": [{"role": "user", "content": "count"}]})
    tool_msg = next(m for m in result["messages"] if isinstance(m, ToolMessage))
    assert "/workspace/.deepagents/large_tool_results/call_big_1" in str(tool_msg.content)
    saved = native.read("/workspace/.deepagents/large_tool_results/call_big_1", 0, 3)
    assert saved.error is None and saved.file_data["content"].startswith("1\n2\n3")
