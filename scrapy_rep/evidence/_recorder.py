"""The evidence archive of one crawl (``REP_EVIDENCE``): WARC records and
``evidence.jsonl`` (docs/evidence.md).

The one download core of scrapy-rep's own files
(:meth:`scrapy_rep._download.OwnDownloads.send`) hands each answer
(:meth:`Evidence.exchange`) and failure (:meth:`Evidence.failed`) here; when a
fetch ends, its reader hands over what it read (:meth:`Evidence.finished`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import socket
from collections import OrderedDict
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import scrapy
from scrapy import signals
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import deferred_from_coro

from scrapy_rep import _clock
from scrapy_rep._context import crawl_context
from scrapy_rep._meta_keys import DECODED_META, ROBOTS_META, WELL_KNOWN_META
from scrapy_rep._version import __version__
from scrapy_rep.cache import lru_put
from scrapy_rep.evidence._warc import WarcFiles, digest, http_block, warc_date
from scrapy_rep.origin import ROBOTS_PATH
from scrapy_rep.policy import http_date

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_rep.config import Config

logger = logging.getLogger(__name__)

JSONL = "evidence.jsonl"
REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
_REWRITTEN = (b"Content-Length", b"Transfer-Encoding")
_MAX_DIGESTS = 10_000
_CONFORMS_TO = "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"


class Evidence:
    """One crawl's evidence archive (see the module docstring)."""

    @classmethod
    def of(cls, crawler: Crawler, config: Config) -> Evidence | None:
        """The crawl's archive, None when ``REP_EVIDENCE`` is not set."""
        if config.evidence is None:
            return None
        context = crawl_context(crawler)
        if context.evidence is None:
            context.evidence = cls(crawler, config)
        found: Evidence = context.evidence
        return found

    def __init__(self, crawler: Crawler, config: Config) -> None:
        assert config.evidence is not None
        self.crawler = crawler
        self.config = config
        self.directory = config.evidence
        self._stats = crawler.stats
        self._files = WarcFiles(self.directory, config.evidence_max_file_size, self._warcinfo)
        self._jsonl: Any = None
        self._pending: dict[tuple[str, str], list[dict[str, Any]]] = {}
        # payload digest -> (record id, target URI, WARC-Date) of its first response record
        self._digests: OrderedDict[str, tuple[str, str, str]] = OrderedDict()
        # URL -> the same, of its latest response with a body (what a 304 confirms)
        self._latest: OrderedDict[str, tuple[str, str, str]] = OrderedDict()
        self._errors = 0
        self.failed_closed = False
        """REP_EVIDENCE_REQUIRED and a write failed: the spider closes, and
        requests that waited for robots.txt go no further (:meth:`drop`)."""
        crawler.signals.connect(self._opened, signal=signals.spider_opened)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    # -- what the download core hands over ------------------------------------------

    def exchange(self, request: Request, response: Response, started: float) -> None:
        """One answer of a hop or attempt: its request and response records."""
        hop: dict[str, Any] = {"url": request.url, "status": response.status}
        try:
            self._write_exchange(request, response, started, hop)
        except Exception as exc:  # the archive never changes what the crawl obeys
            self._error(exc)
        self._pending.setdefault(_key(request), []).append(hop)

    def failed(self, request: Request, error: BaseException) -> None:
        """A hop or attempt that got no answer (refused, timed out, ignored)."""
        reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        hop = {"url": request.url, "status": None, "error": reason, "time": warc_date(_clock.now())}
        self._pending.setdefault(_key(request), []).append(hop)

    def finished(
        self, path: str, origin: str, reading: dict[str, Any], *, whole: bool = False
    ) -> dict[str, Any] | None:
        """A fetch of ``path`` of ``origin`` ended with ``reading`` (outcome,
        expiry, what was read; ``whole``: the last answer's whole body was
        read): its metadata record and evidence.jsonl line. The fetch's line
        (None when nothing was downloaded here)."""
        hops = self._pending.pop((path, origin), None)
        if not hops:
            return None
        last = hops[-1]
        if whole:
            reading = {**reading, "parsed_sha256": last.get("sha256")}
        line: dict[str, Any] = {
            "file": path,
            "origin": origin,
            "url": hops[0]["url"],
            "final_url": last["url"],
            "status": last["status"],
            **reading,
            "time": warc_date(_clock.now()),
            "fetched_at": last.get("fetched_at"),
            "cached": last.get("cached", False),
            "sha256": last.get("sha256"),
            "bytes": last.get("bytes"),
            "truncated": last.get("truncated", False),
            "validators": last.get("validators", {}),
            "warc_file": last.get("warc_file"),
            "warc_offset": last.get("warc_offset"),
            "warc_record_id": last.get("record_id"),
            "hops": hops,
        }
        try:
            written = self._files.write(
                "metadata",
                [("WARC-Target-URI", line["url"])]
                + ([("WARC-Refers-To", last["record_id"])] if last.get("record_id") else []),
                json.dumps(line, sort_keys=True).encode("utf-8"),
                when=_clock.now(),
                content_type="application/json",
            )
            line["metadata_record_id"] = written.record_id
            self._stats.inc_value("rep/evidence/records")
            self._append_line(line)
        except Exception as exc:
            self._error(exc)
        return line

    # -- records -----------------------------------------------------------------

    def _write_exchange(
        self, request: Request, response: Response, started: float, hop: dict[str, Any]
    ) -> None:
        body = response.body
        cached = "cached" in response.flags
        when = _clock.now()
        fields: list[tuple[str, str]] = []
        if cached:  # dated by its original answer, never now
            date = response.headers.get(b"Date")
            sent = http_date(date.decode("latin-1")) if date else None
            fields.append(("Scrapy-Rep-Served-From", "scrapy-httpcache"))
            if sent is None:
                fields.append(("Scrapy-Rep-Original-Date", "unknown"))
            when = started = sent if sent is not None else when
        sha = hashlib.sha256(body).hexdigest()
        truncated = "download_stopped" in response.flags or len(body) > self.config.max_size
        hop.update(
            fetched_at=warc_date(when),
            cached=cached,
            sha256=sha,
            bytes=len(body),
            truncated=truncated,
            validators=_validators(response),
        )
        uri = response.url
        request_written = self._files.write(
            "request",
            [("WARC-Target-URI", uri)],
            _request_head(response.request if response.request is not None else request),
            when=started,
            content_type="application/http;msgtype=request",
        )
        self._stats.inc_value("rep/evidence/records")
        decoded = request.meta.get(DECODED_META)
        head = _response_head(response, rewrite=bool(decoded) or truncated)
        fields = [
            ("WARC-Target-URI", uri),
            ("WARC-Concurrent-To", request_written.record_id),
            *fields,
        ]
        ip = getattr(response, "ip_address", None)
        if ip is not None:
            fields.append(("WARC-IP-Address", str(ip)))
        if decoded:
            fields.append(("Scrapy-Rep-Decoded", str(decoded)))
        if truncated:
            fields.append(("WARC-Truncated", "length"))
        payload_digest = digest(body)
        earlier = self._digests.get(payload_digest) if body and not truncated else None
        payload: bytes | None
        kind, block, payload = "response", head + body, body
        refers: tuple[str, str, str] | None = None
        if response.status == 304:  # the server says the copy we hold is current
            fields.append(("WARC-Profile", NOT_MODIFIED_PROFILE))
            kind, block, payload = "revisit", head, None
            refers = self._latest.get(uri)
        elif earlier is not None:
            fields.append(("WARC-Profile", REVISIT_PROFILE))
            kind, block = "revisit", head
            refers = earlier
        if refers is not None:
            fields += [
                ("WARC-Refers-To", refers[0]),
                ("WARC-Refers-To-Target-URI", refers[1]),
                ("WARC-Refers-To-Date", refers[2]),
            ]
            hop["revisit_of"] = refers[0]
        written = self._files.write(
            kind,
            fields,
            block,
            payload=payload,
            when=when,
            content_type="application/http;msgtype=response",
        )
        this = (written.record_id, uri, warc_date(when))
        if kind == "revisit":
            self._stats.inc_value("rep/evidence/revisits")
        elif body and not truncated:
            lru_put(self._digests, payload_digest, this, _MAX_DIGESTS)
        if body and response.status != 304:
            lru_put(self._latest, uri, earlier or this, _MAX_DIGESTS)
        self._stats.inc_value("rep/evidence/records")
        hop.update(warc_file=written.file, warc_offset=written.offset, record_id=written.record_id)

    def _append_line(self, line: dict[str, Any]) -> None:
        if self._jsonl is None:
            os.makedirs(self.directory, exist_ok=True)
            self._jsonl = open(os.path.join(self.directory, JSONL), "a", encoding="utf-8")  # noqa: SIM115
        self._jsonl.write(json.dumps(line, sort_keys=True) + "\n")
        self._jsonl.flush()
        self._stats.inc_value("rep/evidence/fetches")

    def _warcinfo(self) -> dict[str, str]:
        config = self.config
        return {
            "software": f"scrapy-rep/{__version__} (Scrapy {scrapy.__version__})",
            "scrapy-version": scrapy.__version__,
            "python-version": platform.python_version(),
            "robots-token": config.user_agent,
            "http-header-user-agent": str(self.crawler.settings.get("USER_AGENT") or ""),
            "rep-purposes": ", ".join(config.purposes) or "(none declared)",
            "hostname": socket.gethostname(),
            "pid": str(os.getpid()),
            "format": "WARC File Format 1.1",
            "conformsTo": _CONFORMS_TO,
            "description": "robots.txt and policy files as fetched and read by scrapy-rep",
        }

    # -- errors and the crawl's life -----------------------------------------------

    def _error(self, exc: Exception) -> None:
        """A disk error (OSError), or a bug: the record is lost, the crawl goes
        on (or stops under REP_EVIDENCE_REQUIRED)."""
        self._stats.inc_value("rep/evidence/write_errors")
        self._errors += 1
        with contextlib.suppress(OSError):
            self._files.close()  # the next record starts a new file
        required = self.config.evidence_required
        if self._errors == 1:
            logger.error(
                "Evidence could not be written to %s (%s): %s",
                self.directory,
                exc,
                "closing the spider (REP_EVIDENCE_REQUIRED)"
                if required
                else "the crawl goes on without it; further errors are counted "
                "(rep/evidence/write_errors)",
                exc_info=not isinstance(exc, OSError),
            )
        else:
            logger.debug("Evidence not written to %s: %s", self.directory, exc)
        if required:
            self.failed_closed = True
            self._close_spider()

    def drop(self, request: Request) -> None:
        """End ``request``, which waited for its robots.txt while the archive
        failed under REP_EVIDENCE_REQUIRED: closing the spider does not recall
        requests in progress, and its robots.txt may be the one not recorded."""
        self._stats.inc_value("rep/evidence/dropped")
        raise IgnoreRequest(
            f"not sent: the evidence archive failed (REP_EVIDENCE_REQUIRED): {request.url}"
        )

    def _close_spider(self) -> None:
        engine = self.crawler.engine
        if engine is None or engine.spider is None:
            return
        slot = getattr(engine, "_slot", None)
        if slot is not None and getattr(slot, "closing", None) is not None:
            return  # already closing
        deferred_from_coro(engine.close_spider_async(reason="rep_evidence_failed"))

    def _opened(self) -> None:
        # An unusable directory is known at once, not at the first robots.txt.
        try:
            self._files.open()
        except OSError as exc:
            self._error(exc)

    def _closed(self) -> None:
        self._files.close()
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None


def _key(request: Request) -> tuple[str, str]:
    meta = request.meta
    return meta.get(WELL_KNOWN_META) or ROBOTS_PATH, meta[ROBOTS_META]


def _validators(response: Response) -> dict[str, str]:
    found = {}
    for name, key in ((b"ETag", "etag"), (b"Last-Modified", "last_modified")):
        value = response.headers.get(name)
        if value:
            found[key] = value.decode("latin-1")
    return found


def _request_head(request: Request) -> bytes:
    from scrapy.utils.httpobj import urlparse_cached

    url = urlparse_cached(request)
    target = (url.path or "/") + (f"?{url.query}" if url.query else "")
    headers = [(name, value) for name in request.headers for value in request.headers.getlist(name)]
    if not any(name.lower() == b"host" for name, _ in headers):
        headers.insert(0, (b"Host", url.netloc.encode("latin-1")))
    return http_block(f"{request.method} {target} HTTP/1.1", headers)


def _response_head(response: Response, *, rewrite: bool) -> bytes:
    """The response's status line and every header value; with ``rewrite`` (a
    decoded or cut body), those describing the bytes on the wire renamed."""
    status = response.status
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    protocol = getattr(response, "protocol", None) or "HTTP/1.1"
    headers: list[tuple[bytes, bytes]] = []
    body_size = str(len(response.body)).encode()
    for name in response.headers:
        for value in response.headers.getlist(name):
            renamed = name.title() in _REWRITTEN and (
                name.title() == b"Transfer-Encoding" or rewrite or value.strip() != body_size
            )
            headers.append((b"X-Rep-Original-" + name if renamed else name, value))
    return http_block(f"{protocol} {status} {phrase}".rstrip(), headers)
