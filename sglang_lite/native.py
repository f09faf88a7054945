"""C extensions of the serving path (the int4 kernel, decode attention, the decoder's norm /
RoPE / SiLU ops), built on first use.

Each C file is compiled with ``-O3 -march=native -fopenmp`` (and ``native_common.h``, the
helpers they share, on the include path) into the cache folder by
``constraints.native.build_extension`` (keyed by the source, the flags, the compiler, Python
this CPU's model and feature flags and the shared header, so a cache folder copied to another CPU builds
again) and imported from there. ``-fopenmp`` links ``libgomp.so.1``, which resolves to the
copy torch already loaded: the kernels run on torch's own OpenMP threads. Without a compiler,
where the build fails, or with ``SGLANG_LITE_NATIVE=0``, the loader gives None and its caller
keeps its torch path (one log line says why).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from constraints.native import BuildUnavailable, build_extension, load_once

__all__ = ["build_native", "load_once"]

log = logging.getLogger(__name__)

_HEADER = Path(__file__).with_name("native_common.h")
# -fno-trapping-math: no floating-point exception is ever unmasked here, and without it GCC
# keeps a branch for every `a < b ? a : b` (a compare could trap), so no loop holding one
# vectorizes: SiLU's exp clamp kept its loop scalar (9.3 us a 1536-wide row). It changes no
# result: both arms are computed and one is kept, as the branch would.
_CFLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-trapping-math", f"-I{_HEADER.parent}")


def build_native(source: Path, name: str, what: str, otherwise: str, cflags: tuple[str, ...] = ()):
    """C file ``source`` built with ``-O3 -march=native -fopenmp`` (the cache key holds the
    CPU's flags) and ``cflags`` and imported as ``name``; None, with a log line saying
    ``otherwise``, where it cannot be or ``SGLANG_LITE_NATIVE=0``."""
    if os.environ.get("SGLANG_LITE_NATIVE", "1") == "0":
        log.info("%s off (SGLANG_LITE_NATIVE=0); %s", what, otherwise)
        return None
    try:
        return build_extension(source, name, _CFLAGS + cflags, tag=_cpu_tag() + _HEADER.read_bytes())
    except BuildUnavailable as e:
        log.warning("%s unavailable (%s); %s", what, e, otherwise)
        return None


def _cpu_tag() -> bytes:
    """What ``-march=native`` depends on: the CPU's model and feature flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        import platform

        text = platform.processor() + platform.machine()
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags", "Features"))]
    return hashlib.sha256("\n".join(sorted(set(lines))).encode()).digest()
