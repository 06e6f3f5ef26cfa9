"""The Request.meta keys that scrapy-rep sets on requests, and that modules on
every floor read: its own downloads, their decoding, a stop signal.

They live here, beneath every module that reads them, so that reading a key
never imports the module that sets it (docs/reference.md lists them all).
"""

from __future__ import annotations

from typing import Final

ROBOTS_META: Final = "rep_robotstxt"
"""Marks scrapy-rep's own requests (value: the origin text); set by
:mod:`scrapy_rep._download`."""
WELL_KNOWN_META: Final = "rep_well_known"
"""Marks scrapy-rep's requests for another file of the origin
(/.well-known/tdmrep.json), which carry ROBOTS_META too (value: the file's path)."""
DECODED_META: Final = "rep_decoded"
"""Set on a request whose answer :mod:`scrapy_rep.decompression` decoded: the
codings it came in (``"gzip"``), for the evidence archive (:mod:`scrapy_rep.evidence`)."""
STOP_META: Final = "rep_stop_signal"
"""Set on a request whose answer was a stop signal (value: the
:class:`~scrapy_rep.stop_signals.StopSignal`) by :mod:`scrapy_rep.challenges`;
read by the robots middleware's ``process_response`` and by the slow-down,
which then ignores it."""
