"""Scheduler queue benchmark: what one ``push`` and one ``pop`` cost in a real crawl.

``python benchmarks/queue_calls.py`` crawls benchmarks/_site.py's many-origin
site (``--origins`` x 20 pages, ``CONCURRENT_REQUESTS = 100``, the crawl of
benchmarks/crawl.py) once per mode, each in its own process, with the
scheduler's priority queue timed call by call:

- ``none``: ROBOTSTXT_OBEY = False, Scrapy's own ``DownloaderAwarePriorityQueue``;
- ``rep``: scrapy-rep's add-on at its defaults: ``scrapy_rep.PolitePriorityQueue``
  (the frontier).

Each ``push`` and ``pop`` is timed with ``time.thread_time_ns()`` (the CPU of
the crawl's thread: other processes on a busy machine do not count; the timer
adds about 0.3 µs a call). It prints the median and 90th percentile per call
and, for the frontier, how many slots one ``pop`` looked at. ``--rounds N``
runs the modes N times, alternating; A/B comparisons of two codes run this
script twice with ``PYTHONPATH`` naming each (the child prints which
``scrapy_rep`` it imported).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _child
from _site import Site

MODES = ("none", "rep")


def timed(cls: type, name: str, samples: list[int]) -> None:
    """Wrap ``cls.name`` (its own, not an inherited one) to time each call."""
    original = cls.__dict__[name]
    clock = time.thread_time_ns

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = clock()
        try:
            return original(self, *args, **kwargs)
        finally:
            samples.append(clock() - started)

    setattr(cls, name, wrapper)


def counted(cls: type, name: str, count: list[int]) -> None:
    original = cls.__dict__[name]

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(self, *args, **kwargs)

    setattr(cls, name, wrapper)


def child(job: dict[str, Any]) -> dict[str, Any]:
    from crawl import crawl
    from scrapy.pqueues import DownloaderAwarePriorityQueue

    import scrapy_rep
    from scrapy_rep.frontier.queue import PolitePriorityQueue

    pops: list[int] = []
    pushes: list[int] = []
    looks = [0]
    cls = PolitePriorityQueue if job["mode"] == "rep" else DownloaderAwarePriorityQueue
    timed(cls, "pop", pops)
    timed(cls, "push", pushes)
    if cls is PolitePriorityQueue:
        counted(cls, "_look", looks)
    result = crawl(job["mode"], job["site"], job["origins"], False)
    return {
        "mode": job["mode"],
        "code": str(Path(scrapy_rep.__file__).parent),
        "pages": result["pages"],
        "seconds": result["seconds"],
        "cpu_seconds": result["cpu_seconds"],
        "pop_ns": pops,
        "push_ns": pushes,
        "looks": looks[0],
    }


def run_child(mode: str, site: Site, origins: list[str]) -> dict[str, Any]:
    result, _ = _child.run_child(__file__, {"mode": mode, "site": site.info, "origins": origins})
    return result


def summary(result: dict[str, Any]) -> str:
    if "error" in result:
        return f"{result['mode']:<5} failed: {result['error']}"
    pops = sorted(result["pop_ns"])
    pushes = sorted(result["push_ns"])

    def at(values: list[int], share: float) -> float:
        return values[min(int(share * len(values)), len(values) - 1)] / 1000

    line = (
        f"{result['mode']:<5} pop {statistics.median(pops) / 1000:6.1f} µs "
        f"(p90 {at(pops, 0.9):6.1f}, {len(pops):>6} calls)  "
        f"push {statistics.median(pushes) / 1000:5.1f} µs (p90 {at(pushes, 0.9):5.1f})  "
        f"{result['pages'] / result['seconds']:5.0f} pages/s  "
        f"{1000 * result['cpu_seconds'] / result['pages']:5.2f} CPU ms/page"
    )
    if result["looks"]:
        line += f"  {result['looks'] / len(pops):.2f} looks/pop"
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1, help="runs per mode, alternating")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _site import raise_open_files_limit

        raise_open_files_limit()
        job = json.loads(Path(args.child).read_text())
        Path(args.child).with_suffix(".out").write_text(json.dumps(child(job)))
        return
    modes = [mode for mode in args.modes.split(",") if mode]
    site = Site(args.origins)
    try:
        origins = site.info["origins"]
        for round_ in range(args.rounds):
            for mode in modes:
                load = os.getloadavg()[0]
                result = run_child(mode, site, origins)
                if round_ == 0 and mode == modes[0] and "code" in result:
                    print(f"scrapy_rep from {result['code']}")
                print(f"round {round_ + 1} (load {load:.1f}) {summary(result)}", flush=True)
    finally:
        site.stop()


if __name__ == "__main__":
    main()
