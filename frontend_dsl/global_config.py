"""SGLang's ``global_config``: the process-wide settings its programs read and write.

``global_config.default_backend`` is what ``set_default_backend`` sets and what ``run`` /
``run_batch`` use when given no ``backend=``; ``enable_precache_with_tracing`` makes
``run_batch`` prefill a program's constant prefix first. This one object is the DSL's only
global state, kept because SGLang programs set it by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class GlobalConfig:
    default_backend: Any = None
    enable_precache_with_tracing: bool = True
    verbosity: int = 0  # 2: print each program's text after it runs (as SGLang does)


global_config = GlobalConfig()
