"""``scrapy robots --pins FILE``: the pinned robots.txt beside the current one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scrapy_rep.commands._explain import UrlVerdict
    from scrapy_rep.origin import Origin
    from scrapy_rep.pins import PinWatch
    from scrapy_rep.policy import Entry


def pin_report(
    watch: PinWatch, origin: Origin, entry: Entry, verdicts: Sequence[UrlVerdict], agent: str
) -> dict[str, Any]:
    """What the pin of ``origin`` says against ``entry`` (what the crawl found
    now, and ``verdicts``, its verdicts of the URLs), and each URL's verdict
    under the pinned rules when they are at hand, beside the one now."""
    pinned = watch.pins.get(origin.text)
    report: dict[str, Any] = {
        "robots_txt": origin.robots_url,
        "pinned_sha256": pinned,
        "current_sha256": entry.sha256 or None,
    }
    if pinned is None:
        report["state"] = "not pinned"
        return report
    changed = watch.changed.get(origin)
    if changed is None:
        report["state"] = "matches" if entry.sha256 == pinned else "not compared"
        report["reason"] = "" if entry.sha256 == pinned else entry.reason or entry.outcome
        return report
    report["state"] = "changed"
    report["changes"] = changed.what
    if changed.unread:
        report["unread"] = changed.unread
    rules = changed.pinned_rules
    if rules is not None:
        pairs = [(v, rules.decide(v.url, user_agent=agent)) for v in verdicts]
        report["pinned_verdicts"] = [
            {"url": v.url, "allowed": d.allowed, "line": d.line, "rule": d.rule, "now": v.verdict}
            for v, d in pairs
        ]
    return report


def pin_notes(reports: list[dict[str, Any]]) -> list[str]:
    """A note per pinned body the evidence archive names but could not give back."""
    return [
        f"the pinned robots.txt of {report['robots_txt']} was not read back from the "
        f"evidence archive: {report['unread']}"
        for report in reports
        if report.get("unread")
    ]


def render_pins(reports: list[dict[str, Any]], path: str) -> str:
    lines = [f"pins from {path}"]
    for report in reports:
        lines.append("")
        lines.append(report["robots_txt"])
        pinned, current = report["pinned_sha256"], report["current_sha256"]
        state = report["state"]
        if pinned is None:
            lines.append("  pin       none for this origin")
            continue
        lines.append(f"  pinned    sha256 {pinned}")
        lines.append(f"  now       sha256 {current or '-'}")
        if state == "matches":
            lines.append("  pin       MATCHES: the verdicts are the pinned ones")
        elif state == "not compared":
            lines.append(f"  pin       not compared ({report['reason']}: nothing new was read)")
        else:
            lines.append(f"  pin       CHANGED: {report['changes']}")
            verdicts = report.get("pinned_verdicts")
            if verdicts is None and report.get("unread"):
                lines.append("  pinned    rules not at hand (see the note above)")
            elif verdicts is None:
                lines.append(
                    "  pinned    rules not at hand (--state DIR, or --pins with an evidence "
                    "directory, may hold them)"
                )
            for verdict in verdicts or ():
                then = "ALLOWED" if verdict["allowed"] else "FORBIDDEN"
                now = f"now {verdict['now'].upper()}"
                lines.append(f"  pinned    {then:<10} {now:<14} {verdict['url']}")
    return "\n".join(lines)
