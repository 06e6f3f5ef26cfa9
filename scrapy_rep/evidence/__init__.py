"""What scrapy-rep fetched and read, kept (docs/evidence.md): the evidence
archive (:class:`Evidence`, ``REP_EVIDENCE``: WARC records and
``evidence.jsonl``), each checked response's provenance (:class:`Provenance`),
and its copy into items (:class:`ProvenanceMiddleware`).
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
