"""Where a benchmark's JSON report goes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_report(report: Any, path: str | Path) -> Path:
    """Write ``report`` as indented JSON to ``path`` (parents created) and say where."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"\nwrote {path}")
    return path
