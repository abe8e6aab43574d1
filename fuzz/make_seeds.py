#!/usr/bin/env python3
"""Writes the seed inputs of fuzz/corpus/<target>/seed-*.

Seeds are small, readable where the format allows, and cover each target's
main paths. Inputs the fuzzer found (regressions) are named crash-* or
regress-* and are never touched by this script. Run it from anywhere:
    fuzz/make_seeds.py
"""
import gzip
import io
import json
import os
import shutil
import socket
import struct
import subprocess
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
# Archives end after their two zero blocks, not padded to 10 KiB records.
tarfile.RECORDSIZE = 2 * tarfile.BLOCKSIZE


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def tar(members, fmt=tarfile.PAX_FORMAT, gz=False):
    """members: (name, type, data_or_target, mode) with type f|d|l|h|c|p."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for name, kind, data, mode in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            info.mtime = 1700000000
            if kind == "f":
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
                continue
            info.type = {"d": tarfile.DIRTYPE, "l": tarfile.SYMTYPE, "h": tarfile.LNKTYPE,
                         "c": tarfile.CHRTYPE, "p": tarfile.FIFOTYPE}[kind]
            if kind in "lh":
                info.linkname = data
            t.addfile(info)
    raw = buf.getvalue()
    return gzip.compress(raw, mtime=0) if gz else raw


def http():
    reqs = {
        "health": "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        "stat": 'POST /deepbox/v1/fs/stat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                'Content-Length: 22\r\n\r\n{"path":"hello.txt"}\r\n',
        "pipelined": "GET /deepbox/v1/info HTTP/1.1\r\nHost: x\r\n\r\n"
                     "GET /v1/files/src HTTP/1.1\r\nHost: x\r\n\r\n"
                     "HEAD /v1/files/hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "chunked_write": 'POST /deepbox/v1/fs/write HTTP/1.1\r\nHost: x\r\n'
                         'Transfer-Encoding: chunked\r\n\r\n'
                         '10\r\n{"path":"new.tx\r\n12\r\nt","content":"hi"}\r\n0\r\n\r\n',
        "raw_put": "PUT /deepbox/v1/fs/raw?path=up.bin&mode=0600 HTTP/1.1\r\nHost: x\r\n"
                   "Content-Length: 5\r\n\r\nhello",
        "raw_put_continue": "PUT /deepbox/v1/fs/raw?path=up.bin HTTP/1.1\r\nHost: x\r\n"
                            "Expect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
        "raw_get": "GET /deepbox/v1/fs/raw?path=src%2Fmain.py HTTP/1.1\r\nHost: x\r\n\r\n",
        "tar_download": 'POST /deepbox/v1/fs/tar/download HTTP/1.1\r\nHost: x\r\n'
                        'Content-Length: 16\r\n\r\n{"paths":["src"]}',
        "legacy_list": "GET /list/src HTTP/1.1\r\nHost: x\r\n\r\n",
        "upload": "POST /upload HTTP/1.1\r\nHost: x\r\n"
                  "Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 94\r\n\r\n"
                  '--b\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\n'
                  "data\r\n--b--\r\n",
        "too_big": "POST /deepbox/v1/fs/write HTTP/1.1\r\nHost: x\r\n"
                   "Content-Length: 99999999999\r\n\r\n{",
        "bad_percent": "GET /v1/files/%zz HTTP/1.1\r\nHost: x\r\n\r\n",
        "exec_refused": 'POST /deepbox/v1/exec HTTP/1.1\r\nHost: x\r\nContent-Length: 19\r\n\r\n'
                        '{"argv":["/bin/true"]}',
    }
    for k, v in reqs.items():
        put("http_server", k, v)


def daemon_api():
    routes = ["fs/stat", "fs/list", "fs/read", "fs/write", "fs/edit", "fs/mkdir", "fs/move",
              "fs/delete", "fs/glob", "fs/grep", "fs/tar/download", "exec", "processes",
              "exec/attach", "exec/cancel", "upload", "raw_get", "raw_put", "tar_upload",
              "processes_get", "signal", "v1_get", "v1_put", "v1_post", "v1_delete",
              "list", "exists", "download", "fs/tree"]
    idx = {r: i for i, r in enumerate(routes)}
    bodies = {
        "fs/stat": '{"path":"link_in"}',
        "fs/list": '{"path":"src","recursive":true}',
        "fs/read": '{"path":"hello.txt","offset":1,"limit":5}',
        "fs/write": '{"path":"a/b/new.txt","content":"x","mode":"0640"}',
        "fs/edit": '{"path":"hello.txt","old_string":"world","new_string":"there",'
                   '"replace_all":true}',
        "fs/mkdir": '{"path":"d1/d2","parents":true}',
        "fs/move": '{"source":"hello.txt","destination":"src/h.txt"}',
        "fs/delete": '{"path":"src","recursive":true}',
        "fs/glob": '{"pattern":"**/*.py","path":"/"}',
        "fs/grep": '{"pattern":"TODO","regex":false,"output_mode":"content","glob":"*.py"}',
        "fs/tree": '{"path":"/","max_entries":50,"skip_dirs":[".git","src"]}',
        "fs/tar/download": '{"paths":["src","hello.txt"]}',
        "exec": '{"argv":["ls","-l"],"cwd":"src","env":{"A":"1"},"timeout_ms":1000,'
                '"output_encoding":"base64","stdin":"x"}',
        "processes": '{"shell":"sleep 1","cwd":"/"}',
        "exec/attach": '{"exec_id":"e1","after":0}',
        "exec/cancel": '{"exec_id":"e1"}',
        "upload": '--deepboxfuzz\r\nContent-Disposition: form-data; name="file"; '
                  'filename="up.txt"\r\n\r\ncontent\r\n--deepboxfuzz--\r\n',
        "signal": '{"signal":"SIGTERM"}',
        "v1_put": "new content",
        "v1_post": '--deepboxfuzz\r\nContent-Disposition: form-data; name="file"; '
                   'filename="x.txt"\r\n\r\nx\r\n--deepboxfuzz--\r\n',
    }
    queries = {"raw_get": "path=hello.txt", "raw_put": "path=up.bin&mode=0600",
               "tar_upload": "path=up", "v1_get": "", "list": ""}
    for r in routes:
        body = bodies.get(r, "")
        if r == "tar_upload":
            body = tar([("x", "d", b"", 0o755), ("x/y.txt", "f", b"y", 0o644)]).decode("latin-1")
        data = bytes([idx[r]]) + (queries.get(r, "") + "\n").encode() + body.encode("latin-1")
        put("daemon_api", r.replace("/", "_"), data)


def path_resolver():
    put("path_resolver", "basic", "a/b/c.txt\n/a/../a/b\n@/d/file\n@\n.\n\n..\n")
    put("path_resolver", "symlinks", "a/link_rel/file\nabs_in/e\nabs_out/passwd\nesc_rel/secret\n"
        "a/esc_file\nsibling/secret\nsibling_abs\nloop1\nself/self/a\nup/root\ndotdot_in/a\n"
        "file_link\ndangling\nslash/etc\nd/e/deep_up\nd/e/abs_self_parent/x\nmagic/etc\n")
    put("path_resolver", "absolute", "%/outside/secret\n%/rootevil/secret\n%/root/../outside\n"
        "@/../root/a\n@evil/secret\n//a//b/\n@/./a/./b/../b\n")


def glob():
    for i, p in enumerate(["*.py\nsrc/main.py\na.py", "**/*.py", "src/**", ".*/**/*",
                           "{a,src/*}.py", "**/[!a-m]*.{txt,py}", "/src/*/er/*",
                           "*\\*.txt", "q/?", "unicode/?.txt", "**/.env", "x/**/**/w.py",
                           "{{a,b},{c,d}}.t?t", "[[]", "sp ace/*"]):
        put("glob", str(i), p)


def grep():
    text = "hello world\nTODO: fix\r\nfoo bar baz\n\nlast line without newline"
    cases = [(0, "TODO", text), (1, "fo+ ba[rz]", text), (3, "(?i)HELLO|^$", text),
             (2, "world", text), (1 | 4, "o", text), (8, "a", text), (1, r"\bbar\b", text),
             (16, "xyz", "abc" * 1500 + "xyz\n"), (1 | 16, "x.z", "abc" * 1500 + "xyz\n"),
             (0, "nul", "has\0nul\n"), (1, "(a|b)*c", "ababc\n" * 5), (1, "$", "a\nb\n"),
             (0, "é", "café\ncafe\n")]
    for i, (flags, pat, t) in enumerate(cases):
        put("grep", str(i), bytes([flags]) + pat.encode() + b"\n" + t.encode())


def tar_extract():
    f = tarfile
    put("tar_extract", "basic", tar([("a", "d", b"", 0o755), ("a/b.txt", "f", b"hello", 0o644),
                                     ("a/link", "l", "b.txt", 0o777)]))
    put("tar_extract", "gnu_gz", tar([("long/" + "n" * 120, "f", b"x", 0o600)],
                                     fmt=f.GNU_FORMAT, gz=True))
    put("tar_extract", "ustar", tar([("u.txt", "f", b"u" * 700, 0o4755)], fmt=f.USTAR_FORMAT))
    put("tar_extract", "escape_dotdot", tar([("../../outside/keep", "f", b"evil", 0o644)]))
    put("tar_extract", "escape_abs", tar([("/tmp/evil", "f", b"evil", 0o644)]))
    put("tar_extract", "symlink_then_file", tar([("l", "l", "../../outside", 0o777),
                                                 ("l/keep", "f", b"evil", 0o644)]))
    put("tar_extract", "planted_link", tar([("out_link/keep", "f", b"evil", 0o644),
                                            ("abs_file_link", "f", b"evil", 0o644)]))
    put("tar_extract", "hardlink", tar([("h", "h", "../../outside/keep", 0o644),
                                        ("h2", "h", "out_link/keep", 0o644)]))
    put("tar_extract", "devices", tar([("null", "c", b"", 0o666), ("fifo", "p", b"", 0o644)]))
    put("tar_extract", "dir_replace", tar([("sibling_link", "d", b"", 0o755),
                                           ("sibling_link/x", "f", b"x", 0o644)]))


def oci_layer():
    put("oci_layer", "basic", tar([("usr", "d", b"", 0o755), ("usr/bin/tool", "f", b"#!", 0o4755),
                                   ("bin", "l", "usr/bin", 0o777), ("etc/abs", "l", "/etc/x", 0o777),
                                   ("usr/bin/tool2", "h", "usr/bin/tool", 0o644)], gz=True))
    put("oci_layer", "whiteouts", tar([("etc/.wh.gone", "f", b"", 0o644), (".wh.dir", "f", b"", 0o644),
                                       ("var/cache/.wh..wh..opq", "f", b"", 0o644),
                                       ("var/cache/new", "f", b"n", 0o644),
                                       (".wh..wh.plnk", "f", b"", 0o644)]))
    put("oci_layer", "escape_dotdot", tar([("../outside/keep", "f", b"evil", 0o644)]))
    put("oci_layer", "escape_abs", tar([("/tmp/evil", "f", b"evil", 0o644)]))
    put("oci_layer", "symlink_then_file", tar([("l", "l", "../outside_link", 0o777),
                                               ("l/keep", "f", b"evil", 0o644)]))
    put("oci_layer", "whiteout_through_link", tar([("l", "l", "/", 0o777),
                                                   ("l/.wh.etc", "f", b"", 0o644)]))
    put("oci_layer", "hardlink_shadow", tar([("s", "h", "/etc/shadow", 0o644),
                                             ("t", "h", "../../outside/keep", 0o644)]))
    put("oci_layer", "devices", tar([("null", "c", b"", 0o666), ("fifo", "p", b"", 0o644)]))
    plain = tar([("z/file", "f", b"zstd layer", 0o644), ("z/.wh.x", "f", b"", 0o644)])
    if shutil.which("zstd"):  # a tar+zstd layer (Python has no zstd module)
        put("oci_layer", "zstd", subprocess.run(["zstd", "-q", "-c"], input=plain,
                                                check=True, capture_output=True).stdout)
    put("oci_layer", "replace", tar([("a", "f", b"1", 0o644), ("a", "d", b"", 0o755),
                                     ("a/b", "f", b"2", 0o644), ("a", "l", "x", 0o777)]))


def sse():
    put("sse", "basic", b"\x00event: ping\ndata: {}\n\ndata: a\ndata: b\nid: 7\n\n")
    put("sse", "crlf", b"\x05event: x\r\ndata: 1\r\n\r\n: comment\r\ndata:2\r\r")
    put("sse", "unterminated", b"\x02data: tail")


def anthropic():
    ev = lambda name, obj: f"event: {name}\ndata: {json.dumps(obj)}\n\n"
    full = (ev("message_start", {"type": "message_start", "message": {
                "model": "claude", "usage": {"input_tokens": 10}}}) +
            ev("content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "text", "text": ""}}) +
            ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "text_delta", "text": "Hi"}}) +
            ev("content_block_stop", {"type": "content_block_stop", "index": 0}) +
            ev("content_block_start", {"type": "content_block_start", "index": 1,
                                       "content_block": {"type": "tool_use", "id": "t1",
                                                         "name": "ls"}}) +
            ev("content_block_delta", {"type": "content_block_delta", "index": 1,
                                       "delta": {"type": "input_json_delta",
                                                 "partial_json": "{\"path\": \"/\"}"}}) +
            ev("content_block_stop", {"type": "content_block_stop", "index": 1}) +
            ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                                 "usage": {"output_tokens": 5}}) +
            ev("ping", {"type": "ping"}) + ev("message_stop", {"type": "message_stop"}))
    put("anthropic_stream", "full", b"\x07" + full.encode())
    put("anthropic_stream", "error_event", b"\x01" + ev("error", {"type": "error", "error": {
        "type": "overloaded_error", "message": "busy"}}).encode())
    put("anthropic_stream", "status_529", b"\xc0" + json.dumps(
        {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}).encode())


def openai():
    chunk = lambda obj: f"data: {json.dumps(obj)}\n\n"
    full = (chunk({"id": "c", "model": "gpt-4o", "choices": [{"index": 0, "delta": {
                "role": "assistant", "content": "Hi"}}]}) +
            chunk({"choices": [{"index": 0, "delta": {"tool_calls": [{
                "index": 0, "id": "call_1", "type": "function",
                "function": {"name": "ls", "arguments": "{\"pa"}}]}}]}) +
            chunk({"choices": [{"index": 0, "delta": {"tool_calls": [{
                "index": 0, "function": {"arguments": "th\": \"/\"}"}}]}}]}) +
            chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}) +
            chunk({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}) +
            "data: [DONE]\n\n")
    put("openai_stream", "full", b"\x03" + full.encode())
    put("openai_stream", "error", b"\x41" + json.dumps({"error": {"message": "x",
                                                                  "type": "server_error"}}).encode())


def replay():
    header = {"deepbox_replay": 1, "description": "seed", "scripted": True,
              "model": "anthropic:claude-sonnet-4-6"}
    src = os.path.join(HERE, "..", "examples", "fib", "fib.replay.jsonl")
    if os.path.exists(src):
        with open(src, "rb") as f:
            put("replay", "fib", f.read())
    put("replay", "header_only", json.dumps(header) + "\n")


def kubeconfig():
    put("kubeconfig", "full", """apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: ca.crt
    insecure-skip-tls-verify: false
contexts:
- name: dev
  context: {cluster: c, user: u, namespace: team-a}
users:
- name: u
  user:
    tokenFile: token
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: kubectl-plugin
      args: [get-token, --x]
      env: [{name: A, value: "1"}]
      provideClusterInfo: true
""")
    put("kubeconfig", "yaml_features", """a: &anchor {x: [1, 2.5, 0x1f, 0o17, .inf, -.Inf, ~, true]}
b: *anchor
c: |
  block
  text
d: >-
  folded
e: "esc\\u00e9\\t"
f: 'single ''quoted'''
? complex key
: value
---
- second document
- 1e3
""")
    put("kubeconfig", "basic_auth", "clusters: [{name: c, cluster: {server: 'http://h:1'}}]\n"
        "users: [{name: u, user: {username: a, password: b}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")


def k8s_watch():
    obj = lambda name, rv: {"apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                            "kind": "SandboxClaim",
                            "metadata": {"name": name, "resourceVersion": rv}}
    lines = [{"type": "ADDED", "object": obj("a", "101")},
             {"type": "MODIFIED", "object": obj("a", "102")},
             {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "103"}}},
             {"type": "DELETED", "object": obj("a", "104")}]
    put("k8s_watch", "events", b"\x05" + "".join(json.dumps(l) + "\n" for l in lines).encode())
    put("k8s_watch", "gone", b"\x01" + json.dumps({"type": "ERROR", "object": {
        "kind": "Status", "code": 410, "reason": "Expired"}}).encode() + b"\n")
    put("k8s_watch", "list", b"\x40" + json.dumps({"kind": "SandboxClaimList", "metadata": {
        "resourceVersion": "200"}, "items": [obj("b", "150")]}).encode())


def sandbox_copy():
    members = [("r", "d", b"", 0o755), ("r/a.txt", "f", b"a", 0o644),
               ("r/sub", "d", b"", 0o700), ("r/sub/l", "l", "../a.txt", 0o777)]
    put("sandbox_copy", "dir", b"\x00" + tar(members))
    put("sandbox_copy", "contents", b"\x01" + tar(members))
    put("sandbox_copy", "escape", b"\x02" + tar([("r", "d", b"", 0o755),
                                                 ("r/../../precious", "f", b"x", 0o644)]))
    put("sandbox_copy", "link_then_write", b"\x03" + tar([
        ("r", "d", b"", 0o755), ("r/.bashrc", "f", b"overwrite", 0o644),
        ("r/l", "l", "../precious", 0o777), ("r/l", "f", b"through", 0o644)]))
    put("sandbox_copy", "gnu", b"\x04" + tar([("r", "d", b"", 0o755),
                                              ("r/" + "x" * 150, "f", b"long", 0o644)],
                                             fmt=tarfile.GNU_FORMAT))


def shlex():
    for i, s in enumerate(["ls -la /tmp", "echo 'single quoted' \"double $x\" back\\ slash",
                           "a\\\nb \"c\\\"d\" ''", "unterminated 'quote", "tab\tsep\r\nnl",
                           "\"\\\\\\$\\`\"", "trailing\\"]):
        put("shlex", str(i), s)


def multipart():
    put("multipart", "basic", "multipart/form-data; boundary=XyZ\n"
        "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a b.txt\"\r\n"
        "Content-Type: text/plain\r\n\r\nhello\r\n--XyZ\r\n"
        "Content-Disposition: form-data; name=\"path\"\r\n\r\n/tmp\r\n--XyZ--\r\n")
    put("multipart", "quoted_boundary", "multipart/form-data; charset=x; boundary=\"a;b\"\n"
        "--a;b\r\nContent-Disposition: form-data; name=\"f\\\"q\"\r\n\r\n\r\n--a;b--")


def mcp_jsonrpc():
    msgs = {
        "request": {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "ls", "arguments": {"path": "/"}}},
        "string_id": {"jsonrpc": "2.0", "id": "a-1", "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}}},
        "notification": {"jsonrpc": "2.0", "method": "notifications/initialized"},
        "result": {"jsonrpc": "2.0", "id": 7, "result": {"tools": []}},
        "error": {"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": "no",
                                                       "data": {"x": 1}}},
        "batch": [{"jsonrpc": "2.0", "id": 1, "method": "ping"}],
        "null_id": {"jsonrpc": "2.0", "id": None, "method": "ping"},
        "float_id": {"jsonrpc": "2.0", "id": 1.5, "method": "ping"},
    }
    for k, v in msgs.items():
        put("mcp_jsonrpc", k, json.dumps(v))


def address_policy():
    """CIDR line, exceptions line, 16 address bytes, then rtnetlink messages
    (kind byte: bit 0 route, bit 1 keep the type; 2-byte length; bytes)."""
    RTM_NEWADDR, RTM_NEWROUTE = 20, 24
    IFA_ADDRESS, IFA_LOCAL = 1, 2
    RTA_DST, RTA_GATEWAY, RTA_MULTIPATH, RTA_TABLE = 1, 5, 9, 15
    RTN_UNICAST, RTN_LOCAL, RTN_BROADCAST = 1, 2, 3

    def addr(ip):
        fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
        return socket.inet_pton(fam, ip)

    def attr(kind, payload):
        a = struct.pack("=HH", 4 + len(payload), kind) + payload
        return a + b"\0" * (-len(a) % 4)

    def nlmsg(kind, body):
        # nlmsg_len is rewritten by the target (the message's size).
        return struct.pack("=IHHII", 0, kind, 0, 0, 0) + body

    def ifaddr(family, *attrs):
        return nlmsg(RTM_NEWADDR, struct.pack("=BBBBI", family, 24, 0, 0, 1) + b"".join(attrs))

    def route(family, rtype, dst_len, *attrs, table=254):
        return nlmsg(RTM_NEWROUTE, struct.pack("=BBBBBBBBI", family, dst_len, 0, 0, table, 3, 0,
                                               rtype, 0) + b"".join(attrs))

    def hop(gw):
        a = attr(RTA_GATEWAY, addr(gw))
        return struct.pack("=HBBi", 8 + len(a), 0, 0, 2) + a

    def frame(msg, is_route):
        return bytes([1 if is_route else 0]) + struct.pack("<H", len(msg)) + msg

    v4, v6 = socket.AF_INET, socket.AF_INET6
    host = [
        frame(ifaddr(v4, attr(IFA_ADDRESS, addr("198.51.100.9")),
                     attr(IFA_LOCAL, addr("192.0.2.1"))), False),
        frame(ifaddr(v6, attr(IFA_ADDRESS, addr("2001:db8:5::1"))), False),
        frame(ifaddr(v4, attr(IFA_LOCAL, addr("8.8.4.4"))), False),
        frame(route(v4, RTN_UNICAST, 0, attr(RTA_GATEWAY, addr("192.0.2.254"))), True),
        frame(route(v4, RTN_UNICAST, 24, attr(RTA_DST, addr("192.0.2.0"))), True),
        frame(route(v4, RTN_UNICAST, 1, attr(RTA_DST, addr("0.0.0.0"))), True),
        frame(route(v4, RTN_LOCAL, 32, attr(RTA_DST, addr("203.0.113.5")),
                    attr(RTA_TABLE, struct.pack("=I", 255)), table=255), True),
        frame(route(v6, RTN_UNICAST, 64, attr(RTA_DST, addr("2001:db8:5::"))), True),
        frame(route(v4, RTN_UNICAST, 0,
                    attr(RTA_MULTIPATH, hop("198.51.100.1") + hop("192.0.2.7"))), True),
        frame(route(v4, RTN_BROADCAST, 32, attr(RTA_DST, addr("192.0.2.255"))), True),
    ]
    address = addr("192.0.2.7") + b"\0" * 12
    put("address_policy", "host_sets",
        b"192.0.2.0/24\n192.0.2.0/24,203.0.113.0/24 2001:db8:5::/48\n" + address + b"".join(host))
    put("address_policy", "no_exceptions", b"10.1.2.3\n\n" + address + b"".join(host))
    put("address_policy", "embedded_v6",
        b"64:ff9b::a9fe:a9fe\n2001:DB8:1::5/48\t198.51.100.10\n" + addr("2002:c000:201::1"))
    put("address_policy", "mapped", b"::ffff:10.0.0.1/120\n\n" + addr("::ffff:8.8.8.8"))
    put("address_policy", "never_allowed", b"fe80::1/10\n127.0.0.1,192.0.2.9\n" + addr("::1"))
    put("address_policy", "bad_exception", b"10.0.0.0/33\n10.0.0.0/33\n" + addr("8.8.8.8"))


def secret_rewrite():
    """flags byte (bits 0-1 connection host: api.example.com, other.example.org,
    cdn.uploads.example.com, example.net; bit 2 substitute_query; bit 3 the
    HTTP/2 preface first; bits 4-5 chunk size), 2-byte HTTP/1 head length, the
    head, then HTTP/2 records: tag (bit 0: from the server), 2-byte length,
    bytes."""
    p1 = "deepbox-secret-0123456789abcdef0123456789abcdef"
    p2 = "deepbox-secret-fedcba9876543210fedcba9876543210"

    def seed(name, flags, head, records=()):
        head = head.encode()
        data = bytes([flags]) + struct.pack(">H", len(head)) + head
        for server, payload in records:
            data += bytes([1 if server else 0]) + struct.pack(">H", len(payload)) + payload
        put("secret_rewrite", name, data)

    def frame(kind, flags, stream, payload=b""):
        return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
            struct.pack(">I", stream) + payload

    DATA, HEADERS, PRIORITY, RST, SETTINGS, PING, CONT = 0, 1, 2, 3, 4, 6, 9
    END_STREAM, ACK, END_HEADERS, PADDED, PRIO = 1, 1, 4, 8, 0x20

    def hint(v, bits, first):
        top = (1 << bits) - 1
        if v < top:
            return bytes([first | v])
        out = [first | top]
        v -= top
        while v >= 128:
            out.append(0x80 | (v & 127))
            v >>= 7
        return bytes(out + [v])

    def hstr(text):
        b = text.encode() if isinstance(text, str) else text
        return hint(len(b), 7, 0) + b

    def lit(name, value, kind=0x40):  # 0x40 indexed, 0x00 not, 0x10 never
        return bytes([kind]) + hstr(name) + hstr(value)

    def settings(*pairs):
        return b"".join(struct.pack(">HI", k, v) for k, v in pairs)

    req = (b"\x82\x87\x84" + lit(":authority", "api.example.com") +
           lit("authorization", "Bearer " + p1) + lit("cookie", "a=%s; b=%s" % (p1, p2), 0x10) +
           lit("x-api-key", p2, 0))
    seed("http1_bound", 0, "GET /repos HTTP/1.1\r\nHost: api.example.com\r\n"
         "Authorization: Bearer %s\r\nCookie: a=%s; b=%s\r\nX-Custom:  %s%s \r\n\r\n"
         % (p1, p1, p2, p1, p1))
    seed("http1_query_wildcard", 2 | 4, "GET /%s?t=%s&u=%s#f HTTP/1.1\r\n"
         "Host: CDN.uploads.example.com.:443\r\nX-%s: %s\r\n\r\n" % (p1, p1, p2, p1, p1))
    seed("http1_fronted", 0, "POST /x HTTP/1.1\r\nHost: evil.example\r\n"
         "Authorization: %s\r\nContent-Length: 3\r\n\r\n" % p1)
    seed("http1_absolute", 1 | 4, "GET http://other.example.org:80/p?k=%s HTTP/1.1\r\n"
         "Host: other.example.org\r\nX-Key: %s\r\n\r\n" % (p2, p2))
    seed("http1_refused", 0, "GET / HTTP/1.1\r\nHost: api.example.com\r\nHost: x\r\n"
         " folded\r\nA: %s\n\r\n" % p1)
    seed("h2_request", 8 | 0x10, "", [
        (True, frame(SETTINGS, 0, 0, settings((1, 4096), (5, 16384), (3, 100)))),
        (False, frame(SETTINGS, 0, 0, settings((2, 0))) +
         frame(HEADERS, PADDED | PRIO, 1, b"\x03" + b"\x00\x00\x00\x00\x2a" + req[:20] + b"\0\0\0") +
         frame(CONT, END_HEADERS, 1, req[20:]) + frame(DATA, 0, 1, b"body " + p1.encode())),
        (True, frame(SETTINGS, ACK, 0) + frame(PING, 0, 0, b"12345678")),
        (False, frame(SETTINGS, ACK, 0) +
         frame(HEADERS, END_STREAM | END_HEADERS, 1, lit("x-sig", "sig=" + p1, 0))),
        (False, frame(HEADERS, END_STREAM | END_HEADERS, 3,
                      b"\x82\x87\x84" + lit(":authority", "evil.example", 0) + b"\xbf\xbe")),
        (True, frame(RST, 0, 3, b"\0\0\0\x08")),
        (False, frame(PRIORITY, 0, 5, b"\0\0\0\0\x10") + frame(0x42, 0, 0, b"unknown")),
    ])
    seed("h2_table_size_zero", 8 | 0x20, "", [
        (True, frame(SETTINGS, 0, 0, settings((1, 0)))),
        (False, frame(HEADERS, END_HEADERS, 1, req)),
        (False, frame(SETTINGS, ACK, 0) + frame(HEADERS, END_HEADERS | END_STREAM, 3,
                                                b"\x20" + req)),
        (True, frame(SETTINGS, 0, 0, settings((1, 8192)))),
        (False, frame(SETTINGS, ACK, 0) + frame(HEADERS, END_HEADERS | END_STREAM, 5,
                                                b"\x3f\xe1\x3f" + req)),
    ])
    seed("h2_query_path", 0 | 4 | 8 | 0x30, "", [
        (False, frame(HEADERS, END_HEADERS | END_STREAM, 1,
                      b"\x82\x87" + lit(":path", "/%s?t=%s" % (p1, p1), 0) +
                      lit(":authority", "api.example.com:443", 0) + lit("host", "api.example.com", 0) +
                      lit("content-length", p1, 0) + lit("x-" + p1, "v", 0))),
    ])
    seed("h2_interleaved", 8, "", [
        (False, frame(HEADERS, 0, 1, req[:10]) + frame(PING, 0, 0, b"12345678") +
         frame(CONT, END_HEADERS, 1, req[10:])),
    ])
    seed("h2_big_frames", 8 | 0x10, "", [
        (True, frame(SETTINGS, 0, 0, settings((5, 65536)))),
        (False, frame(DATA, 0, 1, b"d" * 16400)),
        (True, frame(SETTINGS, 0, 0, settings((5, 16384)))),
        (False, frame(SETTINGS, ACK, 0) + frame(SETTINGS, ACK, 0) + frame(PING, 0, 0, b"8" * 8)),
    ])
    seed("h2_bad_preface", 0, "", [(False, b"PRI * HTTP/1.1\r\n\r\n")])


def _pb_field(number, payload):
    """A length-delimited protobuf field (payload < 128 bytes)."""
    return bytes([number << 3 | 2, len(payload)]) + payload


def _execute_request(command, env=None, cwd=None):
    config = b"".join(_pb_field(1, a.encode()) for a in command)
    for k, v in (env or {}).items():
        config += _pb_field(2, _pb_field(1, k.encode()) + _pb_field(2, v.encode()))
    if cwd is not None:
        config += _pb_field(3, cwd.encode())
    return _pb_field(1, config)


def process_proto():
    put("process_proto", "sdk_request", _execute_request(["/bin/sh", "-c", "echo hi"], {"A": "1"}, "sub"))
    put("process_proto", "response", b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x12\x03out\x1a\x01e")
    put("process_proto", "unknown_fields", b"\x0a\x0c\x0a\x02ls\x48\x01\x55abcd\x59abcdefgh")


def grpc_h2():
    """HTTP/2 frames after the client preface (grpc_h2_fuzz.cc)."""
    def frame(kind, flags, stream, payload=b""):
        return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload

    def lit(name, value):  # literal without indexing, new name
        return b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + value.encode()

    def request(path="/process.v1.ProcessService/Execute", extra=b""):
        return (b"\x83\x86" + lit(":path", path) + lit(":authority", "x") +
                lit("content-type", "application/grpc") + lit("te", "trailers") + extra)

    def grpc(message, flag=0):
        return bytes([flag]) + struct.pack(">I", len(message)) + message

    DATA, HEADERS, RST, SETTINGS, PING, WINDOW = 0, 1, 3, 4, 6, 8
    END_STREAM, END_HEADERS = 1, 4
    settings = frame(SETTINGS, 0, 0)
    ok = _execute_request(["echo", "hi"])
    put("grpc_h2", "execute", settings + frame(HEADERS, END_HEADERS, 1, request(extra=lit("grpc-timeout", "5S"))) +
        frame(DATA, END_STREAM, 1, grpc(ok)))
    put("grpc_h2", "two_calls_and_reset", settings + frame(HEADERS, END_HEADERS, 1, request()) +
        frame(HEADERS, END_HEADERS, 3, request()) + frame(DATA, END_STREAM, 3, grpc(ok)) +
        frame(RST, 0, 1, struct.pack(">I", 8)) + frame(PING, 0, 0, b"12345678"))
    put("grpc_h2", "absurd_length", settings + frame(HEADERS, END_HEADERS, 1, request()) +
        frame(DATA, 0, 1, b"\x00\xff\xff\xff\xff"))
    put("grpc_h2", "compressed", settings + frame(HEADERS, END_HEADERS, 1, request()) +
        frame(DATA, END_STREAM, 1, grpc(ok, 1)))
    put("grpc_h2", "unknown_method", settings + frame(HEADERS, END_HEADERS | END_STREAM, 1,
                                                      request("/process.v1.ProcessService/Start")))
    put("grpc_h2", "window_and_split", settings + frame(WINDOW, 0, 0, struct.pack(">I", 1000)) +
        frame(HEADERS, END_HEADERS, 1, request()) + frame(DATA, 0, 1, grpc(ok)[:3]) +
        frame(DATA, END_STREAM, 1, grpc(ok)[3:]))


if __name__ == "__main__":
    for fn in [http, daemon_api, path_resolver, glob, grep, tar_extract, sse, anthropic, openai,
               replay, kubeconfig, k8s_watch, sandbox_copy, shlex, multipart, mcp_jsonrpc,
               address_policy, secret_rewrite, oci_layer, process_proto, grpc_h2]:
        fn()
