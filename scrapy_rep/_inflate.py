"""Content-Encoding decoding that never produces more than a limit. No Scrapy.

A few kilobytes can inflate to a gigabyte, and RFC 9309 §2.5 lets a crawler
read only the first 500 KiB: every layer is decoded with an output bound,
``limit`` bytes of text and ``limit + CHUNK`` of an inner layer. A stream cut
short gives what it decoded so far. ``deflate`` is zlib-wrapped (RFC 9110) or,
as some servers send it, raw; ``br`` and ``zstd`` only with a module that
bounds its output. A name that transforms nothing (``utf-8``, ``none``) is
ignored wherever it stands (Scrapy's middleware stops decoding there); a
compression not decoded here makes the answer :class:`Undecodable`
(docs/robotstxt.md, "Compression").
"""

from __future__ import annotations

import importlib
import io
import zlib
from collections.abc import Callable, Sequence
from typing import Any

CHUNK = 64 * 1024
"""Output asked of a decoder per call."""
MAX_CODINGS = 4
"""More content codings than this on one answer are refused (ignored names not counted)."""
NOT_DECODED = frozenset(
    {
        *(b"compress", b"x-compress", b"aes128gcm", b"dcb", b"dcz", b"exi", b"pack200-gzip"),
        *(b"bzip2", b"x-bzip2", b"xz", b"lzma", b"lz4", b"snappy", b"sdch"),
    }
)
"""Codings that transform the body and are not decoded here: the IANA HTTP Content
Coding Registry's other entries, then compressions some servers name unregistered."""
ZSTD_WINDOW_LOG_MAX = 23
"""RFC 9659: an 8 MiB window at most for the zstd content coding."""
_GZIP = 32 + zlib.MAX_WBITS  # 47: a gzip or a zlib header, told apart by zlib


def _first_module(*names: str) -> Any:
    """The first of these modules that imports, or None."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


_brotli = _first_module("brotli", "brotlicffi")
# output_buffer_limit and can_accept_more_data came together in brotli 1.2.0
# and brotlicffi 1.2.0.0: an older one cannot be bounded.
_BOUNDED = hasattr(getattr(_brotli, "Decompressor", None), "can_accept_more_data")
_BROTLI = _brotli if _BOUNDED else None
_zstd = _first_module("compression.zstd", "backports.zstd")
_zstandard = None if _zstd is not None else _first_module("zstandard")


class Undecodable(ValueError):
    """An answer whose codings cannot be read (unknown, too many, or broken from the start)."""


def _zlib(data: bytes, limit: int, wbits: int) -> bytes:
    out: list[bytes] = []
    size = 0
    decoder = zlib.decompressobj(wbits)
    while data and size < limit:
        try:
            piece = decoder.decompress(data, min(CHUNK, limit - size))
        except zlib.error:
            if not out:
                raise Undecodable("broken deflate data") from None
            break  # keep what came out before the damage
        out.append(piece)
        size += len(piece)
        if decoder.eof:  # a gzip file may hold several members
            data = decoder.unused_data
            if wbits != _GZIP:
                break
            decoder = zlib.decompressobj(wbits)
        else:
            data = decoder.unconsumed_tail
            if not piece and not data:
                break
    return b"".join(out)


def _gzip(data: bytes, limit: int) -> bytes:
    return _zlib(data, limit, _GZIP)


def _deflate(data: bytes, limit: int) -> bytes:
    # RFC 9110's deflate is zlib-wrapped; some servers send raw deflate.
    wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and ((data[0] << 8) | data[1]) % 31 == 0
    return _zlib(data, limit, zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)


def _br(data: bytes, limit: int) -> bytes:
    if _BROTLI is None:
        raise Undecodable("br needs brotli >= 1.2 or brotlicffi >= 1.2")
    decoder = _BROTLI.Decompressor()
    out: list[bytes] = []
    size = 0
    try:
        piece = decoder.process(data, output_buffer_limit=min(CHUNK, limit))
        while True:
            out.append(piece)
            size += len(piece)
            if size >= limit or decoder.is_finished() or not piece:
                break
            piece = decoder.process(b"", output_buffer_limit=min(CHUNK, limit - size))
    except _BROTLI.error:
        if not out:
            raise Undecodable("broken br data") from None
    return b"".join(out)


def _zstd_decode(data: bytes, limit: int) -> bytes:
    out: list[bytes] = []
    size = 0
    if _zstd is not None:
        options = {_zstd.DecompressionParameter.window_log_max: ZSTD_WINDOW_LOG_MAX}
        decoder = _zstd.ZstdDecompressor(options=options)
        try:
            while size < limit:
                piece = decoder.decompress(data, max_length=min(CHUNK, limit - size))
                data = b""
                out.append(piece)
                size += len(piece)
                if decoder.eof:  # another frame may follow
                    data = decoder.unused_data
                    if not data:
                        break
                    decoder = _zstd.ZstdDecompressor(options=options)
                elif decoder.needs_input:
                    break  # cut short: keep what came out
        except _zstd.ZstdError:
            if not out:
                raise Undecodable("broken zstd data") from None
        return b"".join(out)
    if _zstandard is not None:
        reader = _zstandard.ZstdDecompressor(
            max_window_size=1 << ZSTD_WINDOW_LOG_MAX
        ).stream_reader(io.BytesIO(data), read_across_frames=True)
        try:
            while size < limit:
                piece = reader.read(min(CHUNK, limit - size))
                if not piece:
                    break
                out.append(piece)
                size += len(piece)
        except _zstandard.ZstdError:
            if not out:
                raise Undecodable("broken zstd data") from None
        return b"".join(out)
    raise Undecodable("zstd needs backports.zstd or zstandard")


_DECODERS: dict[bytes, Callable[[bytes, int], bytes]] = {
    b"gzip": _gzip,
    b"x-gzip": _gzip,
    b"deflate": _deflate,
    b"br": _br,
    b"zstd": _zstd_decode,
}
_TRANSFORMS = _DECODERS.keys() | NOT_DECODED


def codings(header_values: Sequence[bytes]) -> list[bytes]:
    """The content codings of ``Content-Encoding`` header values, in the order applied."""
    return [c.strip().lower() for v in header_values for c in v.split(b",") if c.strip()]


def ignored(header_values: Sequence[bytes]) -> list[bytes]:
    """The coding names :func:`decode` ignores (they transform nothing we know of)."""
    return [c for c in codings(header_values) if c not in _TRANSFORMS and c != b"identity"]


def decode(body: bytes, header_values: Sequence[bytes], limit: int) -> bytes:
    """At most ``limit`` bytes of ``body`` decoded. Raises :class:`Undecodable`."""
    applied = [c for c in codings(header_values) if c in _TRANSFORMS]
    if len(applied) > MAX_CODINGS:
        raise Undecodable(f"{len(applied)} content codings")
    for step, coding in enumerate(reversed(applied), 1):  # the last applied comes off first
        decoder = _DECODERS.get(coding)
        if decoder is None:
            raise Undecodable(f"content coding {coding.decode('latin-1')!r} is not decoded here")
        # An inner layer is compressed data, a little longer than its own
        # output at worst (stored blocks): a little slack, still bounded.
        body = decoder(body, limit if step == len(applied) else limit + CHUNK)
    return body[:limit]


def accept_encoding() -> bytes:
    """The codings this module decodes with a bound, for ``Accept-Encoding``."""
    names = [b"gzip", b"deflate"]
    if _BROTLI is not None:
        names.append(b"br")
    if _zstd is not None or _zstandard is not None:
        names.append(b"zstd")
    return b", ".join(names)
