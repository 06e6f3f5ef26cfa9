"""One benchmark crawl in a process of its own: a JSON job in, a JSON result out.

A benchmark script runs itself as ``script --child JOB``: the child reads the
job, crawls, and writes its result beside it (``JOB`` with the suffix
``.out``). A fresh process per crawl keeps each measured crawl's reactor,
memory and imports its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def run_child(script: str, job: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Run ``script --child`` on ``job``: its result and its stderr. A child that
    failed gives ``{"mode": job["mode"], "error": ...}`` with its last lines."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.json"
        path.write_text(json.dumps(job))
        proc = subprocess.run(
            [sys.executable, script, "--child", str(path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        out = path.with_suffix(".out")
        if proc.returncode != 0 or not out.exists():
            tail = "\n".join(proc.stderr.splitlines()[-15:])
            return {
                "mode": job["mode"],
                "error": f"exit code {proc.returncode}\n{tail}",
            }, proc.stderr
        result: dict[str, Any] = json.loads(out.read_text())
        return result, proc.stderr
