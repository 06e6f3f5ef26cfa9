"""The Redis tests' Scrapy workers (tests/_redis_worker.py), each a process
of its own, forked from one that imported what every worker imports (import
as ``from redis_workers import ...``).

A worker started as a new Python spent 0.85 CPU-s before it crawled, mostly
importing Scrapy, its components, scrapy-redis and scrapy-rep; forked, 0.35
CPU-s: each Redis test starts two or three. Each child installs its own
reactor, as its settings say (scrapy_forks.py: none is imported before the
fork), and prints its report as the script does.
"""

from __future__ import annotations

import atexit
import functools
import json
from pathlib import Path
from typing import Any

from scrapy_forks import Process, ScrapyForks, scrapy_components

WORKER = Path(__file__).with_name("_redis_worker.py")


def _imports() -> list[str]:
    """What a worker imports before its first request: Scrapy's default
    components, scrapy-redis, scrapy-rep and the test's own download handler."""
    return [
        *scrapy_components(),
        "scrapy_redis.scheduler",
        "scrapy_redis.dupefilter",
        "scrapy_rep.addon",
        "scrapy_rep.middleware",
        "sent_stamp",
    ]


@functools.cache
def _forks() -> ScrapyForks:
    """One fork server per test process, for its whole run."""
    forks = ScrapyForks(preload=_imports(), path=[str(WORKER.parent)])
    atexit.register(forks.close)
    return forks


def start_worker(config: dict[str, Any]) -> Process:
    """``python _redis_worker.py CONFIG``, its output kept (``communicate``)."""
    return _forks().popen(WORKER, json.dumps(config))
