"""Pinned robots.txt bodies read back from an evidence archive. No Scrapy.

An earlier crawl's ``evidence.jsonl`` as a pin file names, for each origin,
the ``parsed_sha256`` and where its response record is: :class:`ArchivedBodies`
reads that one gzip member (or the one a ``revisit`` record refers to), never
more than the parsed bytes and the record's heads, and checks the digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from collections.abc import Iterator
from typing import Any

__all__ = ["ArchiveUnreadable", "ArchivedBodies"]

_HEAD_ROOM = 256 * 1024
"""The most bytes of WARC and HTTP heads read before the payload."""
_CHUNK = 16 * 1024
_END = b"\r\n\r\n"


class ArchiveUnreadable(Exception):
    """The archive names the body but it cannot be read back (the message says why)."""


class ArchivedBodies:
    """The pinned bodies of the evidence archive whose ``evidence.jsonl`` is ``jsonl``."""

    def __init__(self, jsonl: str, pins: dict[str, str]) -> None:
        self.jsonl = jsonl
        self.directory = os.path.dirname(jsonl) or "."
        self._pins = pins
        self._found: dict[str, tuple[dict[str, Any], int]] | None = None

    def body(self, origin: str, sha256: str) -> bytes | None:
        """The bytes whose SHA-256 is ``sha256`` that ``origin``'s rules were
        read from; None when the archive does not name them (a pin file of
        another kind); ArchiveUnreadable when it names them but they cannot
        be read back."""
        found = self._index().get(origin)
        if found is None or self._pins.get(origin) != sha256:
            return None
        hop, size = found
        revisit_of = hop.get("revisit_of")
        if revisit_of:
            target = self._hop(revisit_of)
            if target is None:
                raise ArchiveUnreadable(
                    f"the record it revisits ({revisit_of}) is not in {self.jsonl}"
                )
            hop = target
        payload = self._payload(hop, size)
        if hashlib.sha256(payload).hexdigest() != sha256:
            raise ArchiveUnreadable(
                f"the bytes at {hop.get('warc_file')} offset {hop.get('warc_offset')} do not "
                f"have the pinned sha256 {sha256[:12]}..."
            )
        return payload

    # -- evidence.jsonl --------------------------------------------------------------

    def _lines(self, needle: str = "") -> Iterator[dict[str, Any]]:
        """The lines of evidence.jsonl (those holding ``needle``), one at a time."""
        try:
            with open(self.jsonl, encoding="utf-8", errors="replace") as file:
                for text in file:
                    if needle in text and (line := json_object(text)) is not None:
                        yield line
        except OSError as exc:
            raise ArchiveUnreadable(f"cannot read {self.jsonl}: {exc.strerror or exc}") from None

    def _index(self) -> dict[str, tuple[dict[str, Any], int]]:
        """Origin -> (its pinned fetch's last hop, the bytes parsed); the last line wins."""
        if self._found is None:
            found: dict[str, tuple[dict[str, Any], int]] = {}
            for line in self._lines('"parsed_sha256"') if self._pins else ():
                origin, sha = line.get("origin"), line.get("parsed_sha256")
                hops, size = line.get("hops"), line.get("parsed_bytes")
                if not isinstance(origin, str) or self._pins.get(origin) != sha:
                    continue
                last = hops[-1] if isinstance(hops, list) and hops else None
                if isinstance(last, dict) and isinstance(size, int):
                    found[origin] = (last, size)
            self._found = found
        return self._found

    def _hop(self, record_id: str) -> dict[str, Any] | None:
        for line in self._lines(record_id):
            for hop in line.get("hops") or ():
                if isinstance(hop, dict) and hop.get("record_id") == record_id:
                    return hop
        return None

    # -- the WARC record -------------------------------------------------------------

    def _payload(self, hop: dict[str, Any], size: int) -> bytes:
        """The first ``size`` bytes of the payload of the record ``hop`` names."""
        name, offset = hop.get("warc_file"), hop.get("warc_offset")
        if not isinstance(name, str) or not name or os.path.basename(name) != name:
            raise ArchiveUnreadable(f"{self.jsonl} names no WARC file in this directory")
        if not isinstance(offset, int) or offset < 0:
            raise ArchiveUnreadable(f"{self.jsonl} gives no offset in {name}")
        path = os.path.join(self.directory, name)
        try:
            with open(path, "rb") as file:
                if offset >= os.fstat(file.fileno()).st_size:
                    raise ArchiveUnreadable(f"offset {offset} is past the end of {path}")
                file.seek(offset)
                data = _inflate(file, size + _HEAD_ROOM, path, offset)
        except OSError as exc:
            raise ArchiveUnreadable(f"cannot read {path}: {exc.strerror or exc}") from None
        return _http_payload(data, hop.get("record_id"), size, f"{path} offset {offset}")


def json_object(text: str) -> dict[str, Any] | None:
    """The JSON object ``text`` holds, else None (also read by :mod:`scrapy_rep.pins`)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # a line nested past the parser's depth
        return None
    return data if isinstance(data, dict) else None


def _inflate(file: Any, limit: int, path: str, offset: int) -> bytes:
    """At most ``limit`` bytes of the gzip member that starts where ``file`` is."""
    member = zlib.decompressobj(wbits=31)  # one gzip member; what follows is not read
    out = bytearray()
    read = 0
    try:
        while len(out) < limit and not member.eof:
            chunk = member.unconsumed_tail or file.read(_CHUNK)
            if not chunk:
                break
            if not member.unconsumed_tail:
                read += len(chunk)
            out += member.decompress(chunk, limit - len(out))
            if read > limit + limit // 100 + _CHUNK:  # no real deflate stream is that sparse
                break
    except zlib.error as exc:
        raise ArchiveUnreadable(
            f"no readable gzip member at {path} offset {offset}: {exc}"
        ) from None
    return bytes(out)


def _http_payload(data: bytes, record_id: Any, size: int, where: str) -> bytes:
    """The first ``size`` bytes of the HTTP body of the WARC response record ``data``."""
    warc_end = data.find(_END)
    if not data.startswith(b"WARC/") or warc_end < 0:
        raise ArchiveUnreadable(f"no WARC record at {where}")
    fields = {}
    for line in data[:warc_end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip().decode("utf-8", "replace")
    if fields.get(b"warc-type") != "response" or (
        isinstance(record_id, str) and fields.get(b"warc-record-id") != record_id
    ):
        raise ArchiveUnreadable(f"the record at {where} is not the response evidence.jsonl names")
    block = data[warc_end + len(_END) :]
    http_end = block.find(_END)
    if http_end < 0:
        raise ArchiveUnreadable(f"the record at {where} holds no whole HTTP head")
    payload = block[http_end + len(_END) :][:size]
    if len(payload) < size:
        raise ArchiveUnreadable(f"the record at {where} ends before its {size} parsed bytes")
    return payload
