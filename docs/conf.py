"""Sphinx configuration of the scrapy-rep documentation (MyST Markdown).

Build: ``make docs`` (``sphinx-build -W``: every warning is an error), then open
``docs/_build/html/index.html``. Needs the ``docs`` extra: ``pip install -e '.[docs]'``.
"""

from __future__ import annotations

import re
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
# The version is read from the package source, not imported: building the docs
# needs neither Scrapy nor an installed scrapy-rep.
_SOURCE = (_ROOT / "scrapy_rep" / "_version.py").read_text(encoding="utf-8")
_VERSION = re.search(r'^__version__ = "([^"]+)"', _SOURCE, re.MULTILINE)

project = "scrapy-rep"
author = "scrapy-rep developers"
copyright = "scrapy-rep developers, BSD-3-Clause licence"
release = _VERSION.group(1) if _VERSION else "unknown"
version = release

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# [text](page.md#a-heading) links: anchors for headings down to level 3.
myst_heading_anchors = 3
# Code blocks without a language are shown as they are.
highlight_language = "text"

html_theme = "sphinx_rtd_theme"
# Tables wrap within the text column instead of scrolling past it (_static/tables.css).
html_static_path = ["_static"]
html_css_files = ["tables.css"]
html_title = f"scrapy-rep {release}"
html_show_sourcelink = False
