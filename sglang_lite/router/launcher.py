"""``sglang-lite serve --dp N``: N replicas of ``sglang-lite serve`` on free local ports, and the
router in this process on ``--host``/``--port``.

Each replica gets every serve flag given except the ones this launcher owns (``--dp``, the
routing flags, ``--host``, ``--port``); on CPU the cores are split between them
(``--num-threads``, unless given), on a machine with at least N GPUs each gets its own
(``CUDA_VISIBLE_DEVICES``). The router starts once every replica answers /health. Stopping
the router (SIGINT / SIGTERM) stops the replicas: SIGTERM (they drain), then SIGKILL past
their shutdown timeout; a replica also dies with this process (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import time

from sglang_lite.loopback import ServerStartError, free_port, wait_until_healthy
from sglang_lite.router import run_router
from sglang_lite.router.args import ROUTING_FLAG_NAMES, config_from

log = logging.getLogger(__name__)

_OWNED_FLAGS = frozenset({"--dp", "--dp-size", "--router-policy", "--host", "--port", *ROUTING_FLAG_NAMES})
_START_TIMEOUT_S = 600.0


def launch_replicas_and_router(args, argv: list[str]) -> int:
    """``args``: the parsed ServerArgs (``dp`` > 1); ``argv``: the serve flags as given."""
    ports = [free_port() for _ in range(args.dp)]
    procs = [_start_replica(i, port, args.dp, argv) for i, port in enumerate(ports)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        try:
            wait_until_healthy(list(zip(procs, urls)), _START_TIMEOUT_S)
        except ServerStartError as e:
            log.error("replica %s", e)
            return 1
        logging.getLogger("httpx").setLevel(logging.WARNING)
        config = config_from(args.router_options, urls, args.host, args.port, args.log_level,
                             args.max_request_bytes)
        log.info("%d replicas up (%s); starting the router", args.dp, ", ".join(urls))
        run_router(config)
        return 0
    finally:
        stop_replicas(procs, args.shutdown_timeout + 10.0)


def replica_argv(argv: list[str], port: int) -> list[str]:
    """``argv`` without the launcher's own flags, bound to 127.0.0.1:``port``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in _OWNED_FLAGS:
            skip = "=" not in arg
            continue
        out.append(arg)
    return [*out, "--host", "127.0.0.1", "--port", str(port)]


def _start_replica(index: int, port: int, dp: int, argv: list[str]) -> subprocess.Popen:
    flags = replica_argv(argv, port)
    env = dict(os.environ)
    gpus = _gpu_count()
    if gpus >= dp:
        env["CUDA_VISIBLE_DEVICES"] = str(index)
    elif not any(a.split("=", 1)[0] == "--num-threads" for a in flags):
        flags += ["--num-threads", str(max(1, (os.cpu_count() or 1) // dp))]
    cmd = [sys.executable, "-m", "sglang_lite.server", *flags]
    log.info("replica %d: %s", index, " ".join(cmd))
    return subprocess.Popen(cmd, env=env, preexec_fn=_die_with_parent)


def stop_replicas(procs: list[subprocess.Popen], timeout_s: float) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("replica pid %d did not stop in time: killed", proc.pid)
            proc.kill()
            proc.wait()


def _gpu_count() -> int:
    if not os.environ.get("CUDA_VISIBLE_DEVICES", "x") or not os.path.exists("/dev/nvidiactl"):
        return 0
    import torch

    return torch.cuda.device_count()


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the launcher dies, however it dies (Linux)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
