"""Which label of each usage mechanism speaks for which purpose: data, in one place.

The vocabularies are still moving: each row names the text and revision it
comes from, and a new revision means editing rows only (the tests check
docs/usage.md's mapping table against them). A label mapped to no purpose is
known and deliberately not read; a label in no row is unknown, and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

TRAIN_AI: Final = "train-ai"
SEARCH: Final = "search"
AI_INPUT: Final = "ai-input"
PURPOSES: Final = (TRAIN_AI, SEARCH, AI_INPUT)


@dataclass(frozen=True, slots=True)
class Label:
    """One label of one mechanism and the purposes a statement about it speaks for."""

    label: str
    purposes: tuple[str, ...]
    """Empty: known, and not read (``note`` says why)."""
    source: str
    """The text and revision the label comes from, with this meaning."""
    note: str = ""


# -- IETF AIPREF (draft-ietf-aipref-vocab, draft-ietf-aipref-attach) -------------------
# robots.txt "Content-Usage:" rules and the Content-Usage response header.
CONTENT_USAGE: Final = (
    Label(
        "train-ai",
        (TRAIN_AI,),
        "draft-ietf-aipref-vocab-02 (2025-07) to -08 (2026-09)",
        "AI model training; -08 calls it AI Training",
    ),
    Label("search", (SEARCH,), "draft-ietf-aipref-vocab-01 (2025-06) to -08 (2026-09)"),
    Label(
        "ai-use",
        (AI_INPUT,),
        "draft-ietf-aipref-vocab-08 (2026-09), known from summaries only",
        "input to a generative AI model; -02 used the name for any AI inference, "
        "which covers ai-input too",
    ),
    # Labels of earlier revisions: unknown under -07 and -08, so ignored.
    Label("tdm", (), "vocab-01 only", "text and data mining; removed in -02"),
    Label("ai", (), "vocab-01 only", "renamed train-ai in -02"),
    Label("genai", (), "vocab-01 only", "renamed train-genai in -02"),
    Label("inference", (), "vocab-01 only", "removed in -02"),
    Label("all", (), "vocab-02 only", "renamed bots in -03"),
    Label("bots", (), "vocab-03 and -04", "removed in -05"),
    Label("train-genai", (), "vocab-02 and -03", "removed in -04"),
    Label("ai-output", (), "vocab-04 only", "removed in -05"),
)
CONTENT_USAGE_VALUES: Final = {"y": True, "n": False}
"""Structured Fields Tokens (vocab-01 to -08); anything else states nothing."""

# -- Cloudflare Content Signals Policy (2025-09-24) -------------------------------------
# robots.txt "Content-Signal:" lines and the Content-Signal response header.
CONTENT_SIGNAL: Final = (
    Label("search", (SEARCH,), "Content Signals Policy (Cloudflare, 2025-09)"),
    Label("ai-input", (AI_INPUT,), "Content Signals Policy (Cloudflare, 2025-09)"),
    Label("ai-train", (TRAIN_AI,), "Content Signals Policy (Cloudflare, 2025-09)"),
    Label(
        "use",
        (),
        "Cloudflare managed robots.txt (2026-07)",
        "a level (immediate, reference, full), not a yes or no; no text defines it",
    ),
)
CONTENT_SIGNAL_VALUES: Final = {"yes": True, "no": False}
"""Compared case-insensitively; anything else states nothing."""

# -- W3C TDMRep (TDM Reservation Protocol, CG Final Report 2024-05-10) -----------------
# tdm-reservation: the /.well-known/tdmrep.json rules, the header, the HTML meta.
TDMREP: Final = Label(
    "tdm-reservation",
    (TRAIN_AI, AI_INPUT),
    "TDM Reservation Protocol, W3C Community Group Final Report (2024-05)",
    "text and data mining, which EU law reads as covering AI use; not search, as the "
    "Community Group says",
)
TDMREP_VALUES: Final = {"1": False, "0": True}
"""1: rights reserved (the use is not allowed); 0: not reserved; else unset."""

# -- <meta name="robots"> / X-Robots-Tag directives ------------------------------------
ROBOTS_DIRECTIVES: Final = (
    Label(
        "noai",
        (TRAIN_AI, AI_INPUT),
        "DeviantArt (2022-11), a convention with no specification",
        "not for AI datasets, nor as input to AI models",
    ),
    Label(
        "noimageai",
        (TRAIN_AI, AI_INPUT),
        "DeviantArt (2022-11), a convention with no specification",
        "the same for images: read on image responses only",
    ),
)


def purposes_of(labels: tuple[Label, ...]) -> dict[str, tuple[str, ...]]:
    """``{label: purposes}`` of the labels that speak for some purpose."""
    return {label.label: label.purposes for label in labels if label.purposes}
