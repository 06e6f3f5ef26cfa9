"""What scrapy-rep fetched and read, kept: the evidence archive and provenance.

- :class:`Evidence` (``REP_EVIDENCE``): every robots.txt and tdmrep.json
  download as WARC 1.1 records, and ``evidence.jsonl`` (:mod:`._recorder`,
  written by the small WARC writer of :mod:`._warc`);
- :class:`Provenance`: ``response.meta["rep_provenance"]`` on every response
  the robots middleware checked (:mod:`.provenance`);
- :class:`ProvenanceMiddleware` (``REP_PROVENANCE_FIELD``): that provenance
  copied into items (:mod:`.items`).

See docs/evidence.md.
"""

from scrapy_rep.evidence._recorder import JSONL, Evidence
from scrapy_rep.evidence._warc import warc_date
from scrapy_rep.evidence.items import ProvenanceMiddleware
from scrapy_rep.evidence.provenance import PROVENANCE_META, Provenance, unchecked

__all__ = [
    "JSONL",
    "PROVENANCE_META",
    "Evidence",
    "Provenance",
    "ProvenanceMiddleware",
    "unchecked",
    "warc_date",
]
