"""Sandboxes: create (local), claim (Kubernetes), attach, delete; sync and async.

Lifecycle goes through the ``deepbox`` command (``deepbox sandbox create
--json``, ``ls --json``, ``rm``), found through ``$DEEPBOX_BIN`` or ``PATH``;
everything else talks to the sandbox's daemon directly (``DaemonClient``).
A local sandbox's daemon socket lives in a directory only its creator may
enter, so use a sandbox from the user that created it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from deepbox.client import DaemonClient, ExecCancel, ExecResult, FileInfo, GrepResult, ReadResult, StreamEvent
from deepbox.errors import CLIError, DeepboxError, SandboxNotFoundError, UnsupportedHostError

_EXIT_NOT_FOUND = 3
_EXIT_UNSUPPORTED = 4


def find_deepbox_bin(explicit: str | None = None) -> str:
    """The ``deepbox`` binary: ``explicit``, ``$DEEPBOX_BIN``, or ``deepbox`` on ``PATH``."""
    for candidate in (explicit, os.environ.get("DEEPBOX_BIN")):
        if candidate:
            return candidate
    found = shutil.which("deepbox")
    if found is None:
        raise DeepboxError("the deepbox command was not found: put it on PATH or set DEEPBOX_BIN")
    return found


def _setting_args(settings: Mapping[str, Any] | None) -> list[str]:
    """``--NAME VALUE`` for each provider setting (``deepbox sandbox create --help``).

    The settings are the providers' own, declared once in deepbox (its
    ``--help`` lists them); a name the provider does not have is the CLI's usage
    error (exit 2). ``None`` values are left out.
    """
    args: list[str] = []
    for name, value in (settings or {}).items():
        if not isinstance(name, str) or not name or name.startswith("-") or "=" in name or " " in name:
            raise ValueError(f"bad provider setting name {name!r} (a flag name without '--', e.g. 'memory')")
        if name == "router-token":
            # A command line is readable by every user of the machine.
            raise ValueError("pass the router token as router_token= (it goes by environment, never argv)")
        if value is not None:
            args += [f"--{name}", value if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)]
    return args


def _cluster_flags(
    provider: str | None, namespace: str | None, context: str | None, kubeconfig: str | None
) -> list[str]:
    """``--provider k8s`` and where the cluster is, when any of it is given."""
    if provider not in (None, "local", "k8s"):
        raise ValueError(f"provider must be local or k8s, not {provider!r}")
    if provider != "k8s" and not (namespace or context or kubeconfig):
        return []
    args = ["--provider", "k8s"]
    for flag, value in (("--namespace", namespace), ("--context", context), ("--kubeconfig", kubeconfig)):
        if value:
            args += [flag, value]
    return args


def run_cli(
    args: Sequence[str],
    *,
    deepbox_bin: str | None = None,
    timeout: float | None = 600,
    env: Mapping[str, str] | None = None,
) -> str:
    """Runs ``deepbox ARGS...`` and returns its stdout; a failure raises ``CLIError``.

    ``env``: variables set for the command on top of this process's environment.
    """
    argv = [find_deepbox_bin(deepbox_bin), *args]
    full_env = {**os.environ, **env} if env else None
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=full_env
        )
    except FileNotFoundError as e:
        raise DeepboxError(f"cannot run {argv[0]}: {e}") from e
    except subprocess.TimeoutExpired as e:
        raise CLIError(1, f"timed out after {timeout} s", argv) from e
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        message = "\n".join(ln[len("deepbox: ") :] if ln.startswith("deepbox: ") else ln for ln in lines)
        cls = {_EXIT_NOT_FOUND: SandboxNotFoundError, _EXIT_UNSUPPORTED: UnsupportedHostError}.get(
            proc.returncode, CLIError
        )
        raise cls(proc.returncode, message or f"exit code {proc.returncode}", argv)
    return proc.stdout


@dataclasses.dataclass(frozen=True)
class Secret:
    """A secret a sandbox can use but never read (``deepbox sandbox create --secret``).

    Inside the sandbox the variable holds a placeholder (``deepbox-secret-...``);
    the sandbox's egress proxy puts the real value into HTTPS requests to
    ``hosts`` only. Give exactly one source: ``value`` (handed to the CLI
    through its environment, never its command line), ``env`` (a variable of
    this process), ``file`` (a path) or ``command`` (its output).
    """

    hosts: Sequence[str]
    value: str | None = None
    env: str | None = None
    file: str | None = None
    command: str | None = None
    in_query: bool = False  # also in URL queries (``?token=...``)


def _secret_args(secrets: Mapping[str, Secret] | None) -> tuple[list[str], dict[str, str]]:
    """The ``--secret`` flags for ``secrets`` and the environment the CLI reads values from."""
    args: list[str] = []
    env: dict[str, str] = {}
    for i, (name, secret) in enumerate((secrets or {}).items()):
        given = [k for k in ("value", "env", "file", "command") if getattr(secret, k) is not None]
        if len(given) != 1:
            raise ValueError(f"secret {name}: give exactly one of value, env, file, command (got {given or 'none'})")
        hosts = [secret.hosts] if isinstance(secret.hosts, str) else list(secret.hosts)
        if not hosts:
            raise ValueError(f"secret {name}: no hosts")
        if secret.value is not None:
            var = f"DEEPBOX_PY_SECRET_{i}"
            env[var] = secret.value
            source = f"env:{var}"
        elif secret.env is not None:
            source = f"env:{secret.env}"
        elif secret.file is not None:
            source = f"file:{secret.file}"
        else:
            source = f"cmd:{secret.command}"
        suffix = ";query" if secret.in_query else ""
        args += ["--secret", f"{name}={source}@{','.join(hosts)}{suffix}"]
    return args, env


class Sandbox:
    """One sandbox: its id, its daemon client, and how to delete it.

    Use :meth:`create` (local), :meth:`claim` (Kubernetes) or :meth:`attach`;
    as a context manager it deletes the sandbox on exit when it created it.
    File and process methods are those of :class:`DaemonClient`.
    """

    def __init__(
        self,
        sandbox_id: str,
        client: DaemonClient,
        *,
        meta: Mapping[str, Any] | None = None,
        provider: str = "local",
        owned: bool = False,
        deepbox_bin: str | None = None,
        cluster_args: Sequence[str] = (),
    ) -> None:
        self.id = sandbox_id
        self._client = client
        self._asleep = False  # paused or suspended by this object: woken on next use
        self.meta: dict[str, Any] = dict(meta or {})
        self.provider = provider
        self.owned = owned
        self.deleted = False
        self._deepbox_bin = deepbox_bin
        self._cluster_args = list(cluster_args)
        self._claim_options: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, provider={self.provider!r})"

    @property
    def client(self) -> DaemonClient:
        """The daemon client; using it wakes a sandbox this object paused or suspended."""
        if self._asleep:
            self.resume()
        return self._client

    # ---- lifecycle --------------------------------------------------------

    @classmethod
    def create(
        cls,
        *,
        labels: Mapping[str, str] | None = None,
        ttl: int = 600,
        network: str | None = None,
        pool: str | None = None,
        cold: bool = False,
        rootfs: str | None = None,
        image: str | None = None,
        memory: str | None = None,
        cpus: float | None = None,
        max_processes: int | None = None,
        disk: str | None = None,
        idle_suspend: int | None = None,
        from_snapshot: str | None = None,
        name: str | None = None,
        secrets: Mapping[str, Secret] | None = None,
        settings: Mapping[str, Any] | None = None,
        deepbox_bin: str | None = None,
    ) -> Sandbox:
        """Creates a local sandbox (or takes a warm one from ``pool``).

        Args:
            labels: Labels ``K=V`` (select with ``deepbox sandbox ls/rm --selector``).
            ttl: Seconds until the sandbox deletes itself whatever happens to
                this process (0 = never).
            network: ``"none"``, ``"public"`` or ``"allow=NAME,..."`` (default:
                public where possible).
            secrets: ``{"GH_TOKEN": Secret(hosts=["api.github.com"], env="GITHUB_TOKEN")}``:
                the sandbox sees a placeholder; its proxy puts the value into
                HTTPS requests to the hosts only (needs ``network`` public or
                an allowlist naming them; never a warm sandbox).
            idle_suspend: Suspend it after this many seconds unused (its
                processes end, its files stay; the next use resumes it).
            from_snapshot: Start with the files of this snapshot (:meth:`snapshot`).
            rootfs: A root filesystem directory instead of the host's (not with ``image``).
            image: An OCI image to run the sandbox on (``"python:3.12-slim-bookworm"``,
                ``"registry:5000/team/tools:1"``, ``"...@sha256:..."``), pulled on
                first use into the cache ``deepbox image`` manages; its layers are
                read-only under a writable layer of the sandbox's own, its ``Env``
                and ``WorkingDir`` apply (its ``User`` does not: uid 1000). A warm
                sandbox is taken only if its pool serves the same image.
            name: A name unique among your sandboxes, usable wherever the id
                is (``Sandbox.attach(name)``, ``deepbox sandbox exec NAME``).
            settings: The local provider's settings by name, as its flags
                (``{"memory": "4G", "pool": "ci"}``); ``pool``, ``memory``,
                ``cpus``, ``max_processes`` and ``disk`` are the same settings.
        """
        args = ["sandbox", "create", "--json", "--ttl", str(int(ttl))]
        if idle_suspend is not None:
            args += ["--idle-suspend", str(int(idle_suspend))]
        if from_snapshot:
            args += ["--from-snapshot", from_snapshot]
        if name:
            args += ["--name", name]
        for k, v in (labels or {}).items():
            args += ["--label", f"{k}={v}"]
        if network:
            args += ["--network", network]
        if cold:
            args.append("--cold")
        if rootfs:
            args += ["--rootfs", rootfs]
        if image:
            args.append(f"--image={image}")
        given = {"pool": pool or None, "memory": memory, "cpus": cpus, "max-processes": max_processes, "disk": disk}
        args += _setting_args({**given, **(settings or {})})
        secret_args, secret_env = _secret_args(secrets)
        args += secret_args
        out = run_cli(args, deepbox_bin=deepbox_bin, env=secret_env or None)
        meta = _parse_json_object(out, "deepbox sandbox create --json")
        return cls._from_local_meta(meta, owned=True, deepbox_bin=deepbox_bin)

    @classmethod
    def claim(
        cls,
        *,
        namespace: str | None = None,
        warm_pool: str | None = None,
        labels: Mapping[str, str] | None = None,
        ttl: int = 600,
        router_url: str | None = None,
        router_token: str | None = None,
        ready_timeout: float | None = None,
        context: str | None = None,
        kubeconfig: str | None = None,
        from_snapshot: str | None = None,
        settings: Mapping[str, Any] | None = None,
        deepbox_bin: str | None = None,
    ) -> Sandbox:
        """Claims a sandbox on Kubernetes (a ``SandboxClaim`` from a warm pool).

        Runs ``deepbox sandbox create --provider k8s ... --json``, which must
        print the claim's record with the daemon's ``url`` (e.g. a router or a
        port-forward) and the ``headers`` to send; the CLI's error (message
        and exit code) is raised as is. ``from_snapshot``: the claim starts
        with the files of this snapshot of a Kubernetes sandbox (:meth:`snapshot`).
        ``settings``: the k8s provider's settings by name, as its flags
        (``{"warm-pool": "gpu"}``); the keyword arguments are the same settings.
        """
        cluster = ["--provider", "k8s"]
        if namespace:
            cluster += ["--namespace", namespace]
        if context:
            cluster += ["--context", context]
        if kubeconfig:
            cluster += ["--kubeconfig", kubeconfig]
        args = ["sandbox", "create", "--json", "--ttl", str(int(ttl)), *cluster]
        for k, v in (labels or {}).items():
            args += ["--label", f"{k}={v}"]
        given = {"warm-pool": warm_pool or None, "router-url": router_url or None, "ready-timeout": ready_timeout}
        args += _setting_args({**given, **(settings or {})})
        if from_snapshot:
            args += ["--from-snapshot", from_snapshot]
        # The CLI takes the router token from its environment only (never argv,
        # which other users can read); the record it prints omits it.
        token = router_token if router_token is not None else os.environ.get("AGENT_SANDBOX_ROUTER_TOKEN")
        env = {"AGENT_SANDBOX_ROUTER_TOKEN": router_token} if router_token is not None else None
        out = run_cli(args, deepbox_bin=deepbox_bin, env=env)
        meta = _parse_json_object(out, "deepbox sandbox create --provider k8s --json")
        url = meta.get("url") or router_url
        if not isinstance(url, str):
            raise DeepboxError(
                "the claim's record has no daemon url (no router: set router_url or AGENT_SANDBOX_ROUTER_URL)"
            )
        headers = meta.get("headers") if isinstance(meta.get("headers"), dict) else {}
        client = DaemonClient(url, token=token or None, headers={str(k): str(v) for k, v in headers.items()})
        sb = cls(
            str(meta.get("id", meta.get("name", ""))),
            client,
            meta=meta,
            provider="k8s",
            owned=True,
            deepbox_bin=deepbox_bin,
            cluster_args=cluster,
        )
        # How to claim its forks the same way (fork()).
        sb._claim_options = {
            "namespace": namespace,
            "warm_pool": warm_pool,
            "router_url": router_url,
            "router_token": router_token,
            "ready_timeout": ready_timeout,
            "context": context,
            "kubeconfig": kubeconfig,
            "settings": dict(settings) if settings else None,
        }
        return sb

    @staticmethod
    def inspect(
        sandbox_id: str,
        *,
        provider: str | None = None,
        namespace: str | None = None,
        context: str | None = None,
        kubeconfig: str | None = None,
        router_url: str | None = None,
        router_token: str | None = None,
        deepbox_bin: str | None = None,
    ) -> dict[str, Any]:
        """The sandbox's record, as ``deepbox sandbox inspect --json ID`` prints it.

        Any provider's sandbox: the id's form picks the provider
        (``NAMESPACE/CLAIM`` is a Kubernetes claim; ``provider="k8s"`` makes a
        bare name a claim of ``namespace``). The record says how to reach the
        daemon: ``socket`` (local), or ``url`` and ``headers`` (Kubernetes; the
        claim's daemon token is among them, and in ``token``, only for its
        owner, the user whose claim key made it). A missing sandbox raises
        ``SandboxNotFoundError`` (exit 3).
        """
        args = ["sandbox", "inspect", "--json", *_cluster_flags(provider, namespace, context, kubeconfig)]
        if router_url:
            args += ["--router-url", router_url]
        env = {"AGENT_SANDBOX_ROUTER_TOKEN": router_token} if router_token is not None else None
        out = run_cli([*args, sandbox_id], deepbox_bin=deepbox_bin, env=env)
        return _parse_json_object(out, "deepbox sandbox inspect --json")

    @classmethod
    def attach(
        cls,
        sandbox_id: str,
        *,
        socket: str | None = None,
        url: str | None = None,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        provider: str | None = None,
        namespace: str | None = None,
        context: str | None = None,
        kubeconfig: str | None = None,
        router_url: str | None = None,
        router_token: str | None = None,
        deepbox_bin: str | None = None,
    ) -> Sandbox:
        """Uses an existing sandbox (not deleted on exit unless ``owned`` is set).

        Any sandbox ``deepbox sandbox inspect --json`` shows, from any process:
        a local one (its daemon's socket), or a Kubernetes claim
        (``NAMESPACE/CLAIM``; ``provider``, ``namespace``, ``context`` and
        ``kubeconfig`` say where, ``router_url``/``router_token`` how to reach
        the router, as for :meth:`claim`). A missing sandbox raises
        ``SandboxNotFoundError``. ``socket`` or ``url`` (plus
        ``token``/``headers``) skip the lookup and reach that daemon directly,
        e.g. through a sandbox router.
        """
        if url:
            return cls(sandbox_id, DaemonClient(url, token=token, headers=headers), provider="remote", deepbox_bin=deepbox_bin)
        if socket:
            return cls(sandbox_id, DaemonClient(socket, token=token, headers=headers), deepbox_bin=deepbox_bin)
        meta = cls.inspect(
            sandbox_id,
            provider=provider,
            namespace=namespace,
            context=context,
            kubeconfig=kubeconfig,
            router_url=router_url,
            router_token=router_token,
            deepbox_bin=deepbox_bin,
        )
        if meta.get("provider") != "k8s":
            return cls._from_local_meta(meta, owned=False, deepbox_bin=deepbox_bin)
        daemon_url = meta.get("url") or router_url
        if not isinstance(daemon_url, str) or not daemon_url:
            raise DeepboxError(
                f"sandbox {sandbox_id}: its record has no daemon url (no router: set router_url or AGENT_SANDBOX_ROUTER_URL)"
            )
        if meta.get("token_verifier") is True and meta.get("owner") is not True:
            # Its daemon takes only its owner's token (deploy/k8s/README.md): say so now.
            raise DeepboxError(
                f"sandbox {meta.get('id', sandbox_id)} was claimed with another user's claim key: "
                "only its owner can drive its daemon (deepbox sandbox inspect shows Owner)"
            )
        got = meta.get("headers") if isinstance(meta.get("headers"), dict) else {}
        bearer = router_token if router_token is not None else os.environ.get("AGENT_SANDBOX_ROUTER_TOKEN")
        client = DaemonClient(daemon_url, token=bearer or None, headers={str(k): str(v) for k, v in got.items()})
        sb = cls(
            str(meta.get("id", sandbox_id)),
            client,
            meta=meta,
            provider="k8s",
            owned=False,
            deepbox_bin=deepbox_bin,
            cluster_args=_cluster_flags("k8s", namespace, context, kubeconfig),
        )
        sb._claim_options = {
            "namespace": namespace,
            "warm_pool": meta.get("warm_pool") or None,
            "router_url": router_url,
            "router_token": router_token,
            "ready_timeout": None,
            "context": context,
            "kubeconfig": kubeconfig,
            "settings": None,
        }
        return sb

    @classmethod
    def _from_local_meta(cls, meta: dict[str, Any], *, owned: bool, deepbox_bin: str | None) -> Sandbox:
        sid, sock = meta.get("id"), meta.get("socket")
        if not isinstance(sid, str) or not isinstance(sock, str) or not sock:
            raise DeepboxError(f"the sandbox record lacks id or socket: {str(meta)[:200]}")
        return cls(sid, DaemonClient(sock), meta=meta, owned=owned, deepbox_bin=deepbox_bin)

    def delete(self) -> None:
        """Deletes the sandbox (kills its processes, removes its files). Idempotent."""
        if self.deleted:
            return
        self._client.close()
        try:
            run_cli(["sandbox", "rm", *self._cluster_args, self.id], deepbox_bin=self._deepbox_bin)
        except SandboxNotFoundError:
            pass  # already gone (expired, or deleted elsewhere)
        self.deleted = True

    def pause(self) -> None:
        """Freezes every process of the sandbox: memory and files kept, no CPU.

        Local sandboxes (a cgroup freezer); resumed by :meth:`resume` or by
        the next ``deepbox`` command that uses it. The TTL keeps counting.
        """
        self._mode("pause")

    def suspend(self) -> None:
        """Ends every process of the sandbox (memory and CPU freed); its files stay.

        :meth:`resume` (or the next ``deepbox`` command that uses it) starts
        fresh processes on the same files. The TTL keeps counting.
        """
        self._mode("suspend")

    def resume(self) -> None:
        """Resumes a paused or suspended sandbox (a running one is left as it is)."""
        self._mode("resume")

    def _mode(self, verb: str) -> None:
        if self.deleted:
            raise SandboxNotFoundError(_EXIT_NOT_FOUND, f"sandbox '{self.id}' was deleted (by this program)",
                                       ["sandbox", verb, self.id])
        # Its connection ends with its processes (suspend) or would wait on
        # frozen ones (pause): the next call reconnects.
        self._client.close()
        run_cli(["sandbox", verb, *self._cluster_args, self.id], deepbox_bin=self._deepbox_bin, timeout=300)
        self._asleep = verb != "resume"

    def set_network(self, *, mode: str | None = None, allow: Sequence[str] | str | None = None) -> str:
        """Changes the network policy while the sandbox runs; returns the policy in force.

        ``mode``: ``"none"`` or ``"allow=NAME,..."`` (replaces it); ``allow``:
        edits the allowlist, ``"+name"`` adds and ``"-name"`` removes. New
        connections follow it at once, open ones it refuses are closed. Only a
        sandbox created with an allowlist can change.
        """
        if (mode is None) == (allow is None):
            raise ValueError("give one of mode= or allow=")
        args = ["sandbox", "network", *self._cluster_args, self.id]
        if mode is not None:
            args += ["--mode", mode]
        else:
            args += ["--allow", allow if isinstance(allow, str) else ",".join(allow)]
        return run_cli(args, deepbox_bin=self._deepbox_bin, timeout=60).strip()

    def network_log(self, tail: int = 0) -> list[dict[str, Any]]:
        """The egress log: every connection and request the sandbox's proxy allowed or
        refused (host, port, bytes, rule or reason, secrets used by name) and
        each policy change, oldest first; ``tail`` = only the last N."""
        out = run_cli(
            ["sandbox", "logs", "--network", "--json", "--tail", str(int(tail)), *self._cluster_args, self.id],
            deepbox_bin=self._deepbox_bin,
            timeout=60,
        )
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def snapshot(self, name: str | None = None) -> dict[str, Any]:
        """Copies the sandbox's files (not its memory or processes) into a snapshot.

        Returns its record (``name``, ``provider``, ``source_id``,
        ``size_bytes`` on disk, ``file_bytes``, ``note``...). A running local
        sandbox is paused for the copy where the host can; a Kubernetes one
        is copied while it runs. Restore with
        ``Sandbox.create(from_snapshot=name)`` (local) or
        ``Sandbox.claim(from_snapshot=name)`` (Kubernetes).
        """
        args = ["sandbox", "snapshot", *self._cluster_args, self.id, "--json"]
        if name:
            args += ["--name", name]
        out = run_cli(args, deepbox_bin=self._deepbox_bin, timeout=3600, env=self._router_env())
        return _parse_json_object(out, "deepbox sandbox snapshot --json")

    def fork(self, count: int = 1, *, ttl: int = 600, labels: Mapping[str, str] | None = None) -> list[Sandbox]:
        """``count`` new sandboxes holding this one's files as they are now (owned: deleted on exit).

        A Kubernetes sandbox is copied once (a snapshot, removed after) into
        ``count`` claims made as this one was (:meth:`claim`); all or none.
        """
        if self.provider == "k8s":
            return self._fork_claims(count, ttl=ttl, labels=labels)
        args = ["sandbox", "fork", self.id, "-n", str(int(count)), "--json", "--ttl", str(int(ttl))]
        for k, v in (labels or {}).items():
            args += ["--label", f"{k}={v}"]
        out = run_cli(args, deepbox_bin=self._deepbox_bin, timeout=3600)
        forks = []
        for sid in json.loads(out):
            sb = Sandbox.attach(str(sid), deepbox_bin=self._deepbox_bin)
            sb.owned = True  # made for the caller: deleted on exit
            forks.append(sb)
        return forks

    def _router_env(self) -> dict[str, str] | None:
        # A Kubernetes snapshot needs the daemon, through the router this
        # sandbox was claimed through (the CLI reads it from its environment).
        if self.provider != "k8s":
            return None
        env: dict[str, str] = {}
        url = self._claim_options.get("router_url") or self.meta.get("url")
        if isinstance(url, str) and url:
            env["AGENT_SANDBOX_ROUTER_URL"] = url
        token = self._claim_options.get("router_token")
        if isinstance(token, str):
            env["AGENT_SANDBOX_ROUTER_TOKEN"] = token
        return env or None

    def _fork_claims(self, count: int, *, ttl: int, labels: Mapping[str, str] | None) -> list[Sandbox]:
        # The CLI's fork prints ids only, and a claim's client needs its record
        # (router url, headers): claims from a snapshot print it.
        all_labels = dict(labels or {})
        source = self.id.replace("/", ".")
        if len(source) <= 63:
            all_labels.setdefault("deepbox.dev/forked-from", source)
        snap = self.snapshot()
        forks: list[Sandbox] = []
        try:
            for _ in range(int(count)):
                forks.append(
                    Sandbox.claim(
                        **self._claim_options,
                        labels=all_labels,
                        ttl=ttl,
                        from_snapshot=str(snap["name"]),
                        deepbox_bin=self._deepbox_bin,
                    )
                )
        except BaseException:
            for f in forks:
                f.delete()
            raise
        finally:
            Sandbox.delete_snapshot(str(snap["name"]), deepbox_bin=self._deepbox_bin)
        return forks

    @staticmethod
    def snapshots(*, deepbox_bin: str | None = None) -> list[dict[str, Any]]:
        """The snapshots kept here, of every provider (``deepbox sandbox snapshot ls --json``).

        They live on disk in ``$DEEPBOX_SNAPSHOT_DIR``, else
        ``$DEEPBOX_STATE_DIR/snapshots``, else ``~/.local/state/deepbox/snapshots``.
        """
        out = run_cli(["sandbox", "snapshot", "ls", "--json"], deepbox_bin=deepbox_bin)
        records = json.loads(out)
        return [r for r in records if isinstance(r, dict)]

    @staticmethod
    def delete_snapshot(name: str, *, deepbox_bin: str | None = None) -> None:
        run_cli(["sandbox", "snapshot", "rm", name], deepbox_bin=deepbox_bin)

    @property
    def state(self) -> str:
        """What ``deepbox sandbox ls`` says the sandbox is: running (claimed), paused, suspended...

        Local sandboxes only; ``DeepboxError`` elsewhere.
        """
        if self.provider != "local":
            raise DeepboxError(f"state: not known for {self.provider} sandboxes")
        out = run_cli(["sandbox", "ls", "--json"], deepbox_bin=self._deepbox_bin)
        for meta in json.loads(out):
            if isinstance(meta, dict) and meta.get("id") == self.id:
                mode = meta.get("mode", "running")
                return "running" if mode == "running" else str(mode)
        raise SandboxNotFoundError(_EXIT_NOT_FOUND, f"no such sandbox: {self.id}", ["sandbox", "ls", "--json"])

    def gone_reason(self) -> str | None:
        """Why the sandbox no longer exists, or None while it does.

        Local sandboxes ask ``deepbox`` (``sandbox exec ID -- true``, whose
        "no such sandbox" answer names the cause: an expired TTL, a dead
        daemon or supervisor, or a deletion); others only know whether this
        object deleted it. ``DeepboxError`` when deepbox cannot tell.
        """
        if self.deleted:
            return f"sandbox '{self.id}' was deleted (by this program)"
        if self.provider != "local":
            return None
        try:
            run_cli(["sandbox", "exec", self.id, "--", "true"], deepbox_bin=self._deepbox_bin, timeout=60)
        except SandboxNotFoundError as e:
            return _gone_cause(self.id, e.message)
        return None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.owned:
            self.delete()
        else:
            self._client.close()

    # ---- processes and files (DaemonClient) -------------------------------

    def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        max_output_bytes: int | None = None,
        on_output: Callable[[str, bytes], None] | None = None,
        cancel: ExecCancel | None = None,
    ) -> ExecResult:
        return self.client.exec(
            command, cwd=cwd, env=env, stdin=stdin, timeout=timeout, max_output_bytes=max_output_bytes,
            on_output=on_output, cancel=cancel,
        )

    def exec_stream(self, command: str | Sequence[str], **kwargs: Any) -> Any:
        return self.client.exec_stream(command, **kwargs)

    def stat(self, path: str) -> FileInfo:
        return self.client.stat(path)

    def exists(self, path: str) -> bool:
        return self.client.exists(path)

    def ls(self, path: str = "") -> list[FileInfo]:
        return self.client.ls(path)

    def read(self, path: str, **kwargs: Any) -> ReadResult:
        return self.client.read(path, **kwargs)

    def read_text(self, path: str) -> str:
        return self.client.read_text(path)

    def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        return self.client.read_bytes(path, max_bytes=max_bytes)

    def write(self, path: str, content: str | bytes | Iterable[bytes], *, mode: int | None = None) -> int:
        return self.client.write(path, content, mode=mode)

    def edit(self, path: str, old_string: str, new_string: str, *, replace_all: bool = False) -> int:
        return self.client.edit(path, old_string, new_string, replace_all=replace_all)

    def mkdir(self, path: str, *, parents: bool = True) -> str:
        return self.client.mkdir(path, parents=parents)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        self.client.delete(path, recursive=recursive)

    def glob(self, pattern: str, path: str | None = None, **kwargs: Any) -> tuple[list[str], bool]:
        return self.client.glob(pattern, path, **kwargs)

    def grep(self, pattern: str, path: str | None = None, **kwargs: Any) -> GrepResult:
        return self.client.grep(pattern, path, **kwargs)

    def upload(self, path: str, data: bytes | Iterable[bytes]) -> int:
        return self.client.write(path, data)

    def download(self, path: str, *, max_bytes: int | None = None) -> bytes:
        return self.client.read_bytes(path, max_bytes=max_bytes)

    def upload_many(self, files: Iterable[tuple[str, bytes]]) -> list[Any]:
        return self.client.upload_many(files)

    def download_many(self, paths: Iterable[str]) -> list[Any]:
        return self.client.download_many(paths)


def _gone_cause(sandbox_id: str, cli_message: str) -> str:
    """The CLI's "no such sandbox" message as a cause, without the daemon's stderr tail."""
    text = " ".join(cli_message.split())  # one line (the CLI may wrap)
    if "; last stderr:" in text:
        head, tail = text.split("; last stderr:", 1)
        when = re.search(r" \(at [^()]*\)$", tail)
        text = head + (when.group(0) if when else "")
    if text.startswith(f"no sandbox '{sandbox_id}'"):
        return f"sandbox '{sandbox_id}' was deleted (deepbox has no record of it any more)"
    return text


def _parse_json_object(out: str, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(out)
    except ValueError as e:
        raise DeepboxError(f"{what} printed no JSON: {out[:200]!r}") from e
    if not isinstance(obj, dict):
        raise DeepboxError(f"{what} printed no JSON object: {out[:200]!r}")
    return obj


def _to_thread(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    async def wrapper(self: AsyncSandbox, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self.sync, method.__name__), *args, **kwargs)

    return wrapper


class AsyncSandbox:
    """The async form of :class:`Sandbox` (each call runs in a worker thread).

    ``async with await AsyncSandbox.create(...) as sb:`` deletes on exit.
    """

    def __init__(self, sync: Sandbox) -> None:
        self.sync = sync

    @property
    def id(self) -> str:
        return self.sync.id

    @property
    def client(self) -> DaemonClient:
        return self.sync.client

    @classmethod
    async def create(cls, **kwargs: Any) -> AsyncSandbox:
        return cls(await asyncio.to_thread(functools.partial(Sandbox.create, **kwargs)))

    @classmethod
    async def claim(cls, **kwargs: Any) -> AsyncSandbox:
        return cls(await asyncio.to_thread(functools.partial(Sandbox.claim, **kwargs)))

    @classmethod
    async def attach(cls, sandbox_id: str, **kwargs: Any) -> AsyncSandbox:
        return cls(await asyncio.to_thread(functools.partial(Sandbox.attach, sandbox_id, **kwargs)))

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.sync.__exit__, *exc)

    async def exec_stream(self, command: str | Sequence[str], **kwargs: Any) -> AsyncIterator[StreamEvent]:
        """Yields the command's events as they arrive (read by a worker thread)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        done = object()
        cancelled = threading.Event()

        def pump() -> None:
            gen = self.sync.client.exec_stream(command, include_keepalive=True, **kwargs)
            try:
                for ev in gen:
                    # Stopping here closes the connection: the daemon kills the command.
                    if cancelled.is_set():
                        break
                    if ev.type != "keepalive":
                        loop.call_soon_threadsafe(queue.put_nowait, ev)
            except BaseException as e:  # handed to the consumer
                loop.call_soon_threadsafe(queue.put_nowait, e)
            finally:
                gen.close()
                loop.call_soon_threadsafe(queue.put_nowait, done)

        task = asyncio.ensure_future(asyncio.to_thread(pump))
        try:
            while True:
                item = await queue.get()
                if item is done:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            cancelled.set()
            await asyncio.gather(task, return_exceptions=True)

    delete = _to_thread(Sandbox.delete)
    exec = _to_thread(Sandbox.exec)
    stat = _to_thread(Sandbox.stat)
    exists = _to_thread(Sandbox.exists)
    ls = _to_thread(Sandbox.ls)
    read = _to_thread(Sandbox.read)
    read_text = _to_thread(Sandbox.read_text)
    read_bytes = _to_thread(Sandbox.read_bytes)
    write = _to_thread(Sandbox.write)
    edit = _to_thread(Sandbox.edit)
    mkdir = _to_thread(Sandbox.mkdir)
    remove = _to_thread(Sandbox.remove)
    glob = _to_thread(Sandbox.glob)
    grep = _to_thread(Sandbox.grep)
    upload = _to_thread(Sandbox.upload)
    download = _to_thread(Sandbox.download)
    upload_many = _to_thread(Sandbox.upload_many)
    download_many = _to_thread(Sandbox.download_many)
