"""A small WARC 1.1 writer: records gzipped one by one, files rotated by size. No Scrapy.

Each record is its own gzip member (a reader can seek to any record's offset,
as WARC tools expect), with SHA-256 digests in base32. Writes are synchronous
and small: an ``OSError`` reaches the caller, which decides what it costs.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import itertools
import os
import socket
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import BinaryIO, NamedTuple

from scrapy_rep import _clock

CRLF = b"\r\n"
_SERIALS = itertools.count(1)
"""File numbers, for the whole process: several crawls of one process (or
one crawl's rotations) never pick the same name in one directory."""


def digest(data: bytes) -> str:
    """A WARC digest value: ``sha256:<base32>``."""
    return "sha256:" + base64.b32encode(hashlib.sha256(data).digest()).decode("ascii")


def warc_date(timestamp: float) -> str:
    """WARC 1.1's date: UTC, to the microsecond."""
    when = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def http_block(start_line: str, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """An HTTP message head: start line, header lines, blank line."""
    lines = [start_line.encode("latin-1")]
    lines += [name + b": " + value for name, value in headers]
    return CRLF.join(lines) + CRLF + CRLF


def _field(value: str) -> bytes:
    # A header value on one line, whatever it holds (a URL with a newline, say).
    return value.replace("\r", " ").replace("\n", " ").encode("utf-8")


class Written(NamedTuple):
    """Where a record went."""

    file: str
    """The file's name (in the evidence directory)."""
    offset: int
    """Its gzip member's first byte in that file."""
    record_id: str


class WarcFiles:
    """WARC files in one directory, named ``rep-<UTC time>-<host>-<pid>-<n>.warc.gz``."""

    def __init__(
        self, directory: str, max_size: int, warcinfo: Callable[[], dict[str, str]]
    ) -> None:
        self.directory = directory
        self.max_size = max_size
        self._warcinfo = warcinfo
        self._file: BinaryIO | None = None
        self._name = ""
        host = socket.gethostname().split(".")[0] or "host"
        self._stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in host)

    def write(
        self,
        warc_type: str,
        fields: list[tuple[str, str]],
        block: bytes,
        *,
        payload: bytes | None = None,
        when: float,
        content_type: str,
    ) -> Written:
        """Append one record (``fields``: its WARC headers after the standard
        ones; ``payload``: the HTTP body, digested apart)."""
        file = self._current()
        rid = f"<urn:uuid:{uuid.uuid4()}>"
        head = [
            ("WARC-Type", warc_type),
            ("WARC-Record-ID", rid),
            ("WARC-Date", warc_date(when)),
            *fields,
            ("Content-Type", content_type),
            ("WARC-Block-Digest", digest(block)),
        ]
        if payload is not None:
            head.append(("WARC-Payload-Digest", digest(payload)))
        head.append(("Content-Length", str(len(block))))
        lines = b"".join(name.encode("ascii") + b": " + _field(v) + CRLF for name, v in head)
        record = b"WARC/1.1" + CRLF + lines + CRLF + block + CRLF + CRLF
        offset = file.tell()
        file.write(gzip.compress(record, compresslevel=6, mtime=0))
        file.flush()
        return Written(self._name, offset, rid)

    def open(self) -> None:
        """Open the current file now (an unusable directory raises here)."""
        self._current()

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            file.close()

    # -- files ------------------------------------------------------------------

    def _current(self) -> BinaryIO:
        file = self._file
        if file is not None and file.tell() < self.max_size:
            return file
        self.close()
        os.makedirs(self.directory, exist_ok=True)
        stamp = datetime.fromtimestamp(_clock.now(), timezone.utc).strftime("%Y%m%d%H%M%S")
        serial = next(_SERIALS)
        self._name = f"rep-{stamp}-{self._stem}-{os.getpid()}-{serial:05d}.warc.gz"
        file = open(os.path.join(self.directory, self._name), "xb")  # noqa: SIM115 (kept open)
        self._file = file
        info = "".join(f"{key}: {value}\r\n" for key, value in self._warcinfo().items())
        # (written through write(), which finds this new file current)
        self.write(
            "warcinfo",
            [("WARC-Filename", self._name)],
            info.encode("utf-8"),
            when=_clock.now(),
            content_type="application/warc-fields",
        )
        return file
