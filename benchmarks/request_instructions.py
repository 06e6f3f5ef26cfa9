"""Instructions per request, counted by callgrind: what each mode adds, whatever the machine's load.

``python benchmarks/request_instructions.py`` runs benchmarks/request_path.py's
in-memory crawl (the same sites, pages, download handler and modes: ``none``,
``builtin``, ``rep``, ``rep-txt``), one process per crawl, under
``valgrind --tool=callgrind``, and counts the instructions the crawl
executed between ``spider_opened`` and the first ``spider_idle`` (the
process starts with instrumentation off and a small C helper switches it on
and off: imports, start-up and shutdown are not counted). Instruction counts
do not move with the machine's load, so one crawl per size is enough.

Per mode it crawls ``--origins`` and twice as many sites of 20 pages, and as
many sites of one page each (``/`` only). The difference between the two
20-page crawls over the pages added gives the instructions per download
without any cost per crawl; the one-page crawl gives, with it, the cost per
new origin (the robots.txt download and what comes with it) apart from the
cost per request.

``--attribute`` also runs each mode once with every method of scrapy-rep's
classes (and Scrapy's signal dispatch and scheduler) called through a C
function of its own per family, so that callgrind's inclusive cost of that
function is what the family's calls cost, everything they call included.
Coroutines and (async) generators are left alone: their bodies run when
resumed, outside the family's call. Only the outermost call of a tier counts
(a scrapy-rep method called from another is in its caller's family).

``--ablation`` runs instead one crawl of ``2 * --origins`` sites x 20 pages
per step of ``ABLATION``: ``none``, ``builtin``, ``rep`` with every part
that is not Scrapy's middleware's job turned off by its setting (``bare``),
that with each part turned back on alone, and ``rep``; it prints each step
against the one it differs from in one thing, so that Scrapy's layers
around a part are counted with it, and what the steps leave unexplained
(the parts' interaction). Run it with ``PYTHONHASHSEED`` set (the crawl's
order follows the hash seed: two unseeded crawls of the same code differ by
up to 15 thousand instructions a download). ``--set NAME=VALUE`` adds a
setting to every crawl (the value read as JSON, else as text).

Needs ``valgrind`` and a C compiler with Python's headers. Python runs about
50 times slower under callgrind: the default sizes take a few minutes a crawl.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODES = ("none", "builtin", "rep", "rep-txt")
# rep with only Scrapy's middleware's job left: the rules of robots.txt, each
# origin's file fetched through Scrapy's stack (scrapy-rep's RobotsTxtMiddleware).
BARE: dict[str, Any] = {
    "REP_FRONTIER": False,
    "REP_META_ROBOTS": False,
    "REP_SLOT_LIMIT": False,
    "REP_SLOWDOWN": False,
    "REP_STOP_SIGNALS": False,
    "DOWNLOADER_MIDDLEWARES": {"scrapy_rep.BoundedDecompressionMiddleware": None},
}
# (step, mode, settings, the step it is measured against)
ABLATION: tuple[tuple[str, str, dict[str, Any], str | None], ...] = (
    ("none", "none", {}, None),
    ("builtin", "builtin", {}, "none"),
    ("bare", "rep", BARE, "builtin"),
    (
        "bare+decompression",
        "rep",
        {k: v for k, v in BARE.items() if k != "DOWNLOADER_MIDDLEWARES"},
        "bare",
    ),
    ("bare+meta", "rep", {**BARE, "REP_META_ROBOTS": True}, "bare"),
    ("bare+frontier", "rep", {**BARE, "REP_FRONTIER": True}, "bare"),
    ("bare+slotlimit", "rep", {**BARE, "REP_SLOT_LIMIT": True}, "bare"),
    # the slot limit as rep runs it: told by the frontier's active set, no receivers
    (
        "bare+frontier+slotlimit",
        "rep",
        {**BARE, "REP_FRONTIER": True, "REP_SLOT_LIMIT": True},
        "bare+frontier",
    ),
    ("bare+slowdown", "rep", {**BARE, "REP_SLOWDOWN": True}, "bare"),
    ("bare+stop", "rep", {**BARE, "REP_STOP_SIGNALS": True}, "bare"),
    # the two above share one response_downloaded receiver: both on, one step
    (
        "bare+slowdown+stop",
        "rep",
        {**BARE, "REP_SLOWDOWN": True, "REP_STOP_SIGNALS": True},
        "bare",
    ),
    ("rep", "rep", {}, None),
)
# bare without one piece that no setting of bare turns off (a benchmark-only
# switch, PATCHES) or that a setting bare keeps turns off: (step, mode,
# settings, switches, the step it is measured against). Printed against
# bare, left out of the sum.
SPLIT: tuple[tuple[str, str, dict[str, Any], tuple[str, ...], str], ...] = (
    ("bare-crawldelay", "rep", {**BARE, "REP_OBEY_CRAWL_DELAY": False}, (), "bare"),
    ("bare-provenance", "rep", BARE, ("no-provenance",), "bare"),
    ("bare-response", "rep", BARE, ("no-process-response",), "bare"),
    ("bare-receivers", "rep", BARE, ("no-fetch-receivers",), "bare"),
    ("bare-deadline", "rep", BARE, ("no-deadline",), "bare"),
    (
        "bare+frontier-receivers",
        "rep",
        {**BARE, "REP_FRONTIER": True},
        ("no-fetch-receivers",),
        "bare+frontier",
    ),
)
FAMILIES = 192  # C functions for families: the second half for calls made within tier 1
HALF = FAMILIES // 2

C_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <valgrind/callgrind.h>

static int depth[2];
static int fdepth[%(count)d];
static long fcalls[%(count)d];

static PyObject *start(PyObject *self, PyObject *unused) {
    CALLGRIND_ZERO_STATS;
    CALLGRIND_START_INSTRUMENTATION;
    Py_RETURN_NONE;
}

static PyObject *stop(PyObject *self, PyObject *unused) {
    CALLGRIND_STOP_INSTRUMENTATION;
    CALLGRIND_DUMP_STATS_AT("crawl");
    Py_RETURN_NONE;
}

static PyObject * __attribute__((noinline))
nested(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return PyObject_Vectorcall(args[0], args + 1, nargs - 1, kwnames);
}

#define FAMILY(n) \
static PyObject * __attribute__((noinline)) \
rep_family_##n(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) { \
    __asm__ volatile("" ::: "memory"); \
    return PyObject_Vectorcall(args[0], args + 1, nargs - 1, kwnames) ; \
}
%(families)s

/* call(family, tier, fn, *args, **kwargs) */
static PyObject *call(PyObject *self, PyObject *const *args, Py_ssize_t nargsf,
                      PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    long family = PyLong_AsLong(args[0]);
    long tier = PyLong_AsLong(args[1]);
    PyObject *result;
    if (tier == 0 && depth[1] > 0 && family < %(half)d) {
        family += %(half)d;  /* scrapy-rep's call made within Scrapy's dispatch */
    }
    if (depth[tier] > 0) {
        return nested(args + 2, nargs - 2, kwnames);
    }
    depth[tier]++;
    switch (family) {
%(cases)s
    default: result = nested(args + 2, nargs - 2, kwnames);
    }
    depth[tier]--;
    return result;
}

/* probe(family, fn, *args, **kwargs): each family counted on its own (only
   its outermost call: a family called within itself is not counted twice) */
static PyObject *probe(PyObject *self, PyObject *const *args, Py_ssize_t nargsf,
                       PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    long family = PyLong_AsLong(args[0]);
    PyObject *result;
    if (family < 0 || family >= %(count)d || fdepth[family] > 0) {
        return nested(args + 1, nargs - 1, kwnames);
    }
    fdepth[family]++;
    fcalls[family]++;
    switch (family) {
%(probe_cases)s
    default: result = nested(args + 1, nargs - 1, kwnames);
    }
    fdepth[family]--;
    return result;
}

static PyObject *counts(PyObject *self, PyObject *unused) {
    PyObject *list = PyList_New(%(count)d);
    for (int n = 0; n < %(count)d; n++) {
        PyList_SET_ITEM(list, n, PyLong_FromLong(fcalls[n]));
    }
    return list;
}

static PyMethodDef methods[] = {
    {"start", start, METH_NOARGS, NULL},
    {"counts", counts, METH_NOARGS, NULL},
    {"probe", (PyCFunction)(void (*)(void))probe, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"stop", stop, METH_NOARGS, NULL},
    {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL | METH_KEYWORDS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cgtramp", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cgtramp(void) { return PyModule_Create(&module); }
"""


def _helper() -> Any:
    """Build (once) and import the C helper."""
    source = C_SOURCE % {
        "half": HALF,
        "count": FAMILIES,
        "probe_cases": "\n".join(
            f"    case {n}: result = rep_family_{n}(args + 1, nargs - 1, kwnames); break;"
            for n in range(FAMILIES)
        ),
        "families": "\n".join(f"FAMILY({n})" for n in range(FAMILIES)),
        "cases": "\n".join(
            f"    case {n}: result = rep_family_{n}(args + 2, nargs - 2, kwnames); break;"
            for n in range(FAMILIES)
        ),
    }
    digest = hashlib.sha256((source + sys.version).encode()).hexdigest()[:12]
    build = Path(tempfile.gettempdir()) / f"rep-cgtramp-{digest}"
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    target = build / f"_cgtramp{suffix}"
    if not target.exists():
        build.mkdir(exist_ok=True)
        (build / "_cgtramp.c").write_text(source)
        subprocess.run(
            [
                "cc",
                "-shared",
                "-fPIC",
                "-O1",
                "-fno-ipa-icf",
                "-I",
                sysconfig.get_paths()["include"],
                str(build / "_cgtramp.c"),
                "-o",
                str(target),
            ],
            check=True,
        )
    sys.path.insert(0, str(build))
    import _cgtramp

    return _cgtramp


# ----------------------------------------------------------------- families


def _wrapper(call: Any, family: int, tier: int | None, function: Any) -> Any:
    """``function`` called through family's C function, with the same
    parameters (pydispatch passes a receiver only the arguments it names)."""
    import inspect

    signature = inspect.signature(function)
    params, forward = [], []
    # names no wrapped method has (a method called _call would shadow the caller)
    namespace: dict[str, Any] = {"_cg_call_": call, "_cg_f_": function}
    kw_only_started = False
    for name, param in signature.parameters.items():
        default = ""
        if param.default is not inspect.Parameter.empty:
            namespace[f"_cg_d_{name}"] = param.default
            default = f"=_cg_d_{name}"
        if param.kind is param.VAR_POSITIONAL:
            params.append(f"*{name}")
            forward.append(f"*{name}")
            kw_only_started = True
        elif param.kind is param.VAR_KEYWORD:
            params.append(f"**{name}")
            forward.append(f"**{name}")
        elif param.kind is param.KEYWORD_ONLY:
            if not kw_only_started:
                params.append("*")
                kw_only_started = True
            params.append(f"{name}{default}")
            forward.append(f"{name}={name}")
        else:
            params.append(f"{name}{default}")
            forward.append(name)
    only = [p for p in signature.parameters.values() if p.kind is p.POSITIONAL_ONLY]
    if only:
        params.insert(len(only), "/")
    source = (
        f"def {function.__name__}({', '.join(params)}):\n"
        f"    return _cg_call_({family}, {'' if tier is None else f'{tier}, '}_cg_f_, "
        f"{', '.join(forward)})\n"
    )
    exec(source, namespace)
    wrapped = namespace[function.__name__]
    wrapped.__qualname__ = function.__qualname__
    wrapped.__module__ = function.__module__
    wrapped.__doc__ = function.__doc__
    wrapped.__wrapped_for_callgrind__ = function
    return wrapped


def _plain(function: Any) -> bool:
    import inspect

    return (
        inspect.isfunction(function)
        and not inspect.iscoroutinefunction(function)
        and not inspect.isgeneratorfunction(function)
        and not inspect.isasyncgenfunction(function)
    )


SKIPPED = {"__new__", "__init_subclass__", "__class_getitem__", "__getattr__", "__repr__"}


def install_families(call: Any) -> dict[int, str]:
    """Wrap scrapy-rep's classes' methods (tier 0, one family per module) and
    Scrapy's signal dispatch and scheduler (tier 1): family number -> name."""
    import importlib
    import inspect
    import pkgutil

    import scrapy_rep

    names: dict[int, str] = {}
    by_name: dict[str, int] = {}

    def family_of(name: str) -> int:
        if name not in by_name:
            if len(by_name) >= HALF:
                return FAMILIES  # the default case: not counted apart
            by_name[name] = len(by_name)
            names[by_name[name]] = name
        return by_name[name]

    # tier 1: Scrapy's work that scrapy-rep's components add calls to
    from scrapy.core.scheduler import Scheduler
    from scrapy.signalmanager import SignalManager

    for cls, method, name in (
        (SignalManager, "send_catch_log", "scrapy: SignalManager.send_catch_log"),
        (Scheduler, "enqueue_request", "scrapy: Scheduler.enqueue_request"),
        (Scheduler, "next_request", "scrapy: Scheduler.next_request"),
    ):
        setattr(cls, method, _wrapper(call, family_of(name), 1, getattr(cls, method)))

    modules = []
    for info in pkgutil.walk_packages(scrapy_rep.__path__, "scrapy_rep."):
        if ".commands" in info.name or ".cluster" in info.name or "redis" in info.name:
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:
            continue
    seen: set[type] = set()
    for module in modules:
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls in seen or not cls.__module__.startswith("scrapy_rep"):
                continue
            seen.add(cls)
            family = family_of(_family_name(cls.__module__))
            for attr, value in list(vars(cls).items()):
                if attr in SKIPPED or not _plain(value):
                    continue
                try:
                    setattr(cls, attr, _wrapper(call, family, 0, value))
                except (TypeError, AttributeError, ValueError):
                    continue
    return names


def _family_name(module: str) -> str:
    parts = module.split(".")
    if parts[1] in ("frontier", "_slots", "slowdown", "robotstxt", "evidence", "report", "usage"):
        return ".".join(parts[:3]) if parts[1] in ("frontier", "_slots") else ".".join(parts[:2])
    return module


# ------------------------------------------------------------------- probes

# --probe: these functions, each family counted on its own (inclusive: a probe
# called within another is also in the outer one's count). Plain functions
# only: a coroutine's body runs when it is resumed, outside the call.
PROBES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "scrapy: SignalManager.send_catch_log",
        ("scrapy.signalmanager:SignalManager.send_catch_log",),
    ),
    ("scrapy: Scheduler.enqueue_request", ("scrapy.core.scheduler:Scheduler.enqueue_request",)),
    ("scrapy: Scheduler.next_request", ("scrapy.core.scheduler:Scheduler.next_request",)),
    (
        "scrapy: ExecutionEngine._start_scheduled_requests",
        ("scrapy.core.engine:ExecutionEngine._start_scheduled_requests",),
    ),
    ("scrapy: Downloader._process_queue", ("scrapy.core.downloader:Downloader._process_queue",)),
    (
        "scrapy: stats calls",
        tuple(
            f"scrapy.statscollectors:StatsCollector.{name}"
            for name in ("inc_value", "set_value", "max_value", "min_value")
        ),
    ),
    (
        "scrapy: RobotsTxtMiddleware.process_request_2 (the verdict)",
        ("scrapy.downloadermiddlewares.robotstxt:RobotsTxtMiddleware.process_request_2",),
    ),
    ("scrapy: ProtegoRobotParser.allowed", ("scrapy.robotstxt:ProtegoRobotParser.allowed",)),
    (
        "rep: RobotsTxtMiddleware.process_request",
        ("scrapy_rep.middleware:RobotsTxtMiddleware.process_request",),
    ),
    (
        "rep: RobotsTxtMiddleware.process_response",
        ("scrapy_rep.middleware:RobotsTxtMiddleware.process_response",),
    ),
    ("rep: RobotsTxt.decide", ("scrapy_rep.robotstxt:RobotsTxt.decide",)),
    ("rep: Provenance.decided", ("scrapy_rep.evidence.provenance:Provenance.decided",)),
    (
        "rep: robots.txt downloads' receivers",
        tuple(
            f"scrapy_rep._download:OwnDownloads.{name}"
            for name in ("_bytes_received", "_reached", "_left")
        ),
    ),
    ("rep: frontier push", ("scrapy_rep.frontier.queue:PolitePriorityQueue.push",)),
    ("rep: frontier pop", ("scrapy_rep.frontier.queue:PolitePriorityQueue.pop",)),
    ("rep: frontier _look", ("scrapy_rep.frontier.queue:PolitePriorityQueue._look",)),
    ("rep: frontier _park_full", ("scrapy_rep.frontier.queue:PolitePriorityQueue._park_full",)),
    ("rep: SlotLimits.admit", ("scrapy_rep._slots.limits:SlotLimits.admit",)),
)


def install_probes(probe: Any) -> dict[int, str]:
    """Wrap PROBES' functions (those that exist): family number -> label."""
    import importlib

    names: dict[int, str] = {}
    for family, (label, paths) in enumerate(PROBES):
        names[family] = label
        for path in paths:
            module_name, _, qualname = path.partition(":")
            class_name, _, attr = qualname.rpartition(".")
            try:
                cls = getattr(importlib.import_module(module_name), class_name)
            except (ImportError, AttributeError):
                continue
            function = vars(cls).get(attr)
            if function is None or not _plain(function):
                continue
            setattr(cls, attr, _wrapper(probe, family, None, function))
    return names


# --------------------------------------------------------- benchmark-only switches

# Work of ``bare`` that no setting turns off, removed in the benchmark's child
# only, to count what it costs (the crawl makes the same decisions without it).
_FIXED_PROVENANCE: dict[str, Any] = {"checked": True}


def _no_provenance() -> None:
    """No provenance built per request: one shared dict set in its place."""
    from scrapy_rep.evidence.provenance import Provenance

    def decided(self: Any, origin: Any, entry: Any, found: Any, agent: str) -> dict[str, Any]:
        return _FIXED_PROVENANCE

    Provenance.decided = decided  # type: ignore[method-assign]


def _no_process_response() -> None:
    """scrapy-rep's robots middleware without process_response (which only
    turns a stop signal's answer into a failure: nothing marks one while
    REP_STOP_SIGNALS is off), so Scrapy's manager does not call it."""
    from scrapy_rep.middleware import RobotsTxtMiddleware

    del RobotsTxtMiddleware.process_response


def _no_fetch_receivers() -> None:
    """No receivers connected while robots.txt downloads run (no size or header
    bound, the robots.txt requests stay in the downloader's active set)."""
    from scrapy_rep._download import OwnDownloads

    def _connect(self: Any, on: bool) -> None:
        return None

    OwnDownloads._connect = _connect  # type: ignore[method-assign]


def _no_deadline() -> None:
    """No fetch deadline on scrapy-rep's clock (Scrapy's download_timeout stays)."""
    from scrapy_rep import _slots

    def clock_deadline(request: Any) -> None:
        return None

    _slots.clock_deadline = clock_deadline  # type: ignore[assignment]


PATCHES = {
    "no-provenance": _no_provenance,
    "no-process-response": _no_process_response,
    "no-fetch-receivers": _no_fetch_receivers,
    "no-deadline": _no_deadline,
}


# ------------------------------------------------------------------- the child


def child(job: dict[str, Any]) -> dict[str, Any]:
    import gc

    import request_path
    from scrapy import signals

    cg = _helper()
    for name in job.get("patches", ()):
        PATCHES[name]()
    families = install_families(cg.call) if job.get("attribute") else {}
    probes = install_probes(cg.probe) if job.get("probe") else {}
    seen: dict[str, Any] = {}

    class Counting:
        """Instrumentation on at spider_opened, off at the first spider_idle."""

        def __init__(self, crawler: Any) -> None:
            self.on = False
            self.crawler = crawler
            crawler.signals.connect(self.opened, signal=signals.spider_opened)
            crawler.signals.connect(self.idle, signal=signals.spider_idle)

        @classmethod
        def from_crawler(cls, crawler: Any) -> Counting:
            return cls(crawler)

        def opened(self) -> None:
            self.on = True
            seen["gc"] = gc.get_stats()
            if job.get("gc_off"):  # the probes' costs without collections landing in them
                gc.disable()
            cg.start()

        def idle(self) -> None:
            if self.on:
                cg.stop()
                gc.enable()
                self.on = False
                seen["calls"] = cg.counts()
                seen["gc"] = [  # the collections of each generation while counted
                    {key: after[key] - before[key] for key in after}
                    for before, after in zip(seen["gc"], gc.get_stats(), strict=True)
                ]
                seen["stats"] = {
                    key: value
                    for key, value in self.crawler.stats.get_stats().items()
                    if isinstance(value, int)
                }

    global _COUNTING
    _COUNTING = Counting
    job = {
        **job,
        "steps": False,
        "settings": {**job.get("settings", {}), "EXTENSIONS": {f"{__name__}._counting": 0}},
    }
    result = request_path.child(job)
    result["families"] = families
    result["probes"] = probes
    result["probe_calls"] = {
        label: seen.get("calls", [0] * FAMILIES)[family] for family, label in probes.items()
    }
    result["stats"] = seen.get("stats", {})
    result["gc"] = seen.get("gc", [])
    return result


_COUNTING: Any = None


def _counting(crawler: Any) -> Any:  # Scrapy builds extensions through from_crawler
    return _COUNTING(crawler)


_counting.from_crawler = _counting  # type: ignore[attr-defined]


# ------------------------------------------------------------------ the parent


def run(job: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """One crawl under callgrind: its result, instructions and family costs."""
    pages = "20" if job.get("follow", True) else "1"
    tag = f"{job.get('label', job['mode'])}-{job['origins']}x{pages}"
    tag += "-skip" if job.get("skip") else ""
    tag += "-attr" if job.get("attribute") else ""
    tag += "-probe" if job.get("probe") else ""
    tag += "-native" if job.get("native") else ""
    tag += "-nogc" if job.get("gc_off") else ""
    job_path = out_dir / f"{tag}.json"
    job_path.write_text(json.dumps(job))
    cg_out = out_dir / f"{tag}.callgrind"
    under = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={cg_out}",
    ]
    cmd = [
        *([] if job.get("native") else under),
        sys.executable,
        __file__,
        "--child",
        str(job_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    out = job_path.with_suffix(".out")
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"{tag}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    result["tag"] = tag
    if job.get("native"):  # call counts and stats only
        result["instructions"] = 0
        return result
    dumps = sorted(out_dir.glob(f"{tag}.callgrind*"))
    crawl_dump = [d for d in dumps if _dump_part(d) == "crawl"]
    result["instructions"] = _total(crawl_dump[0])
    result["gc_instructions"] = _gc_instructions(crawl_dump[0])
    if job.get("attribute"):
        result["family_costs"] = _family_costs(crawl_dump[0], result["families"])
    if job.get("probe"):
        costs = _family_costs(crawl_dump[0], result["probes"])
        result["probe_costs"] = {
            label: costs.get(label, {}).get("instructions", 0) for label in result["probe_calls"]
        }
    result["tag"] = tag
    result["dump"] = str(crawl_dump[0])
    return result


def _dump_part(path: Path) -> str:
    with path.open() as file:
        for line in file:
            if line.startswith("desc: Trigger:"):
                return "crawl" if "crawl" in line else line.strip()
            if line.startswith("fl=") or line.startswith("fn="):
                break
    return ""


def _gc_instructions(path: Path) -> int:
    """Inclusive instructions of CPython's collector (gc_collect_main): how much
    of a crawl the garbage collector took (its full collections come in steps)."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in text.splitlines():
        found = re.match(r"\s*([\d,]+) .*gcmodule\.c:gc_collect_main \[", line)
        if found:
            return int(found.group(1).replace(",", ""))
    return 0


def _total(path: Path) -> int:
    with path.open() as file:
        for line in file:
            if line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def _family_costs(path: Path, families: dict[str, str]) -> dict[str, dict[str, int]]:
    """Inclusive instructions and calls of each rep_family_N (callgrind_annotate)."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    costs: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        found = re.match(r"\s*([\d,]+) .*\b(rep_family_(\d+)|nested)\b", line)
        if found and found.group(3) is not None:
            number = found.group(3)
            name = _family_label(families, int(number))
            costs[name] = {"instructions": int(found.group(1).replace(",", ""))}
    calls = _family_calls(path)
    for number, count in calls.items():
        name = _family_label(families, number)
        costs.setdefault(name, {"instructions": 0})["calls"] = count
    return costs


def _family_label(families: dict[str, str], number: int) -> str:
    if number >= HALF:
        return families.get(str(number - HALF), f"family {number - HALF}") + " (within tier 1)"
    return families.get(str(number), f"family {number}")


def _family_calls(path: Path) -> dict[int, int]:
    """Calls of each rep_family_N, from the dump's call lines."""
    names: dict[str, str] = {}
    calls: dict[int, int] = {}
    callee = None
    with path.open() as file:
        for line in file:
            if line.startswith(("fn=", "cfn=")):
                found = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.strip())
                if found is None:
                    continue
                if found.group(2):
                    names[found.group(1)] = found.group(2)
                callee = names.get(found.group(1)) if line.startswith("cfn=") else None
            elif line.startswith("calls=") and callee and callee.startswith("rep_family_"):
                number = int(callee[len("rep_family_") :])
                calls[number] = calls.get(number, 0) + int(line.split("=")[1].split()[0])
                callee = None
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--origins", type=int, default=40, help="sites of the smaller crawl")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--attribute", action="store_true", help="also the families' costs")
    parser.add_argument("--jobs", type=int, default=2, help="crawls under callgrind at once")
    parser.add_argument("--keep", help="keep the callgrind files in this directory")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="one crawl of 2 x --origins sites per step of ABLATION (bare rep, each part on alone)",
    )
    parser.add_argument(
        "--steps",
        help="with --ablation: only these steps, in this order (comma-separated names of "
        "ABLATION; a step that another one run covers, e.g. bare+slotlimit beside "
        "bare+frontier+slotlimit, is printed but left out of the sum)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for every crawl (VALUE read as JSON, else as text); repeatable",
    )
    parser.add_argument(
        "--probe",
        action="store_true",
        help="with --ablation: also each of PROBES' functions' inclusive instructions and calls",
    )
    parser.add_argument(
        "--native",
        action="store_true",
        help="with --ablation: run the crawls without callgrind (calls and stats only)",
    )
    parser.add_argument(
        "--no-gc",
        action="store_true",
        help="with --ablation: the garbage collector off while counting (with --probe: no "
        "collection lands in a probe's count)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        job = json.loads(Path(args.child).read_text())
        Path(args.child).with_suffix(".out").write_text(json.dumps(child(job)))
        return
    from concurrent.futures import ThreadPoolExecutor

    out_dir = Path(args.keep or tempfile.mkdtemp(prefix="rep-callgrind-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    extra = dict(_setting(text) for text in args.set)
    if args.ablation:
        ablation(args, out_dir, extra)
        return
    modes = [m for m in args.modes.split(",") if m]
    jobs: list[dict[str, Any]] = []
    for mode in modes:
        jobs.append({"mode": mode, "origins": args.origins})
        jobs.append({"mode": mode, "origins": 2 * args.origins})
        jobs.append({"mode": mode, "origins": 2 * args.origins, "follow": False})
        if args.attribute:
            jobs.append({"mode": mode, "origins": 2 * args.origins, "attribute": True})
        if mode == "none":  # the same pages as the robots modes download
            for origins in (args.origins, 2 * args.origins):
                jobs.append({"mode": mode, "origins": origins, "skip": ["/private/account"]})
    if extra:
        jobs = [{**job, "settings": extra} for job in jobs]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda job: run(job, out_dir), jobs))
    for result in results:
        print(
            f"{result['tag']:<24} {result['instructions']:>15,} instructions, "
            f"{result['downloads']} downloads, {result['pages']} pages",
            file=sys.stderr,
        )
    report(results, modes)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"callgrind files: {out_dir}", file=sys.stderr)


# steps left out of the sum when the step covering them ran too
COVERED_BY = {
    "bare+slotlimit": "bare+frontier+slotlimit",
    "bare+slowdown": "bare+slowdown+stop",
    "bare+stop": "bare+slowdown+stop",
}


def _setting(text: str) -> tuple[str, Any]:
    name, _, raw = text.partition("=")
    try:
        return name, json.loads(raw)
    except ValueError:
        return name, raw


def ablation(args: Any, out_dir: Path, extra: dict[str, Any]) -> None:
    """One crawl a step, each step against the one it differs from in one thing."""
    from concurrent.futures import ThreadPoolExecutor

    by_name: dict[str, tuple[str, str, dict[str, Any], tuple[str, ...], str | None]] = {
        step[0]: (step[0], step[1], step[2], (), step[3]) for step in ABLATION
    }
    by_name.update({step[0]: step for step in SPLIT})
    if args.steps:
        steps = [by_name[name] for name in args.steps.split(",") if name]
    else:
        steps = [
            by_name[step[0]]
            for step in ABLATION
            if step[0] not in ("bare+slowdown+stop", "bare+frontier+slotlimit")
        ]
    jobs = [
        {
            "mode": mode,
            "origins": 2 * args.origins,
            "label": name.replace("+", "-"),
            "settings": {**settings, **extra},
            "patches": list(patches),
            "probe": args.probe,
            "native": args.native,
            "gc_off": args.no_gc,
        }
        for name, mode, settings, patches, _ in steps
    ]

    def one(job: dict[str, Any]) -> dict[str, Any]:
        result = run(job, out_dir)
        print(
            f"{result['tag']:<28} {result['instructions']:>15,} instructions, "
            f"{result['downloads']} downloads, {result['pages']} pages",
            file=sys.stderr,
            flush=True,
        )
        return result

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(one, jobs))
    per = {
        step[0]: r["instructions"] / r["downloads"] for step, r in zip(steps, results, strict=True)
    }
    # the garbage collector's share apart: its full collections come in steps
    gc_per = {
        step[0]: r.get("gc_instructions", 0) / r["downloads"]
        for step, r in zip(steps, results, strict=True)
    }
    print(
        f"{'step':<26}{'a download':>14}{'against':>26}{'difference':>12}"
        f"{'of it the GC':>14}{'collections (gen 0/1/2)':>26}"
    )
    for (name, _, _, _, against), r in zip(steps, results, strict=True):
        diff = gc_diff = ""
        if against in per:
            diff = f"{per[name] - per[against]:>+12,.0f}"
            gc_diff = f"{gc_per[name] - gc_per[against]:>+14,.0f}"
        runs = "/".join(str(g.get("collections", 0)) for g in r.get("gc", []))
        print(f"{name:<26}{per[name]:>14,.0f}{against or '':>26}{diff:>12}{gc_diff:>14}{runs:>26}")
    # the steps from builtin on; a step another run step covers is left out of the sum
    split = {step[0] for step in SPLIT}
    parts = [
        (s[0], s[4])
        for s in steps
        if s[4] not in (None, "none")
        and s[4] in per
        and COVERED_BY.get(s[0]) not in per
        and s[0] not in split
    ]
    if {"builtin", "bare", "rep"} <= per.keys() and parts:
        explained = sum(per[name] - per[against] for name, against in parts)
        gap = per["rep"] - per["builtin"]
        print(f"rep - builtin {gap:+,.0f}, the steps {explained:+,.0f}")
        print(f"interaction (rep - builtin - the steps) {gap - explained:+,.0f}")
    for step, r in zip(steps, results, strict=True):
        if r.get("probe_calls"):
            print(f"\n{step[0]}: probes, inclusive instructions and calls a download")
            for label, calls in r["probe_calls"].items():
                cost = r.get("probe_costs", {}).get(label, 0)
                print(f"  {label:<62}{cost / r['downloads']:>12,.0f}{calls / r['downloads']:>9.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"callgrind files: {out_dir}", file=sys.stderr)


def report(results: list[dict[str, Any]], modes: list[str]) -> None:
    """Per crawl: instructions per download and per page; per mode, what each
    download added between the two 20-page crawls; the families' costs."""
    print(f"{'crawl':<24}{'instructions':>16}{'downloads':>10}{'pages':>7}{'per download':>14}")
    for r in results:
        print(
            f"{r['tag']:<24}{r['instructions']:>16,}{r['downloads']:>10}{r['pages']:>7}"
            f"{r['instructions'] / r['downloads']:>14,.0f}"
        )
    print()
    for mode in modes:
        runs = [r for r in results if r["mode"] == mode and r["tag"].endswith("x20")]
        runs.sort(key=lambda r: r["downloads"])
        if len(runs) >= 2:
            a, b = runs[0], runs[-1]
            added = (b["instructions"] - a["instructions"]) / (b["downloads"] - a["downloads"])
            print(f"{mode:<10} per download added, smaller to larger crawl: {added:,.0f}")
    for r in results:
        if "family_costs" not in r:
            continue
        print(f"\n{r['tag']}: inclusive instructions per download, by family")
        downloads = r["downloads"]
        for name, cost in sorted(r["family_costs"].items(), key=lambda i: -i[1]["instructions"]):
            print(
                f"  {name:<60} {cost['instructions'] / downloads:>10,.0f}"
                f"  calls/download {cost.get('calls', 0) / downloads:6.2f}"
            )


if __name__ == "__main__":
    main()
