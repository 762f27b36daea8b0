"""Renders the report model to static HTML with jinja2 (autoescape on; data is never marked
safe) and copies the stylesheet. Pages read without JavaScript."""
from __future__ import annotations

import functools
import math
from importlib import resources
from pathlib import Path

import jinja2

from conformance.jsonfile import write_files_atomically
from reports import charts, names
from reports.glossary import FIXED_CLASS_LABEL, numerical_policy_meaning
from reports.model import Report


def num(v, digits: int = 3) -> str:
    """A short number for tables: `digits` significant digits, more where fewer would misstate
    the value against the bound (0.99999998 is never shown as 1, nor 1.0000001 as 1, since 1 is
    the bound itself); the record's strings (inf, nan) as they are; None as a dash."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        text = f"{v:.{digits}g}"
        while float(text) == 1.0 and v != 1.0 and digits < 17:
            digits += 1
            text = f"{v:.{digits}g}"
        return text
    return str(v)


def shortened(v, digits: int = 3) -> bool:
    """Whether num(v, digits) drops digits of v (the table then shows all of them on hover)."""
    return isinstance(v, float) and math.isfinite(v) and float(num(v, digits)) != v


def f32(v) -> str:
    """A float32 value in the 9 significant digits that identify it (its bits are shown beside)."""
    return f"{v:.9g}" if isinstance(v, float) and math.isfinite(v) else num(v)


def full(v) -> str:
    """Every digit the record holds (repr of a float round-trips exactly)."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return repr(v) if isinstance(v, float) else str(v)


def break_points(name: str) -> list[str]:
    """`name` cut after each `_` and `.`, so a template can put <wbr> between the (still
    escaped) pieces and long op or capsule names wrap at word joints, not mid-word."""
    parts, cur = [], ""
    for ch in str(name):
        cur += ch
        if ch in "_.":
            parts.append(cur)
            cur = ""
    return parts + [cur] if cur else parts


def over_bound(v) -> bool:
    return v in ("inf", "nan") or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                   and v > 1)


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    # One environment per process: jinja2 compiles each template once and caches it there.
    env = jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(num=num, full=full, f32=f32, break_points=break_points)
    env.tests.update(over_bound=over_bound, shortened=shortened)
    env.globals.update(histogram=charts.histogram, distribution=charts.distribution,
                       numerical_policy_meaning=numerical_policy_meaning, fixed_class_label=FIXED_CLASS_LABEL,
                       suite_pages=names.SUITE_PAGES, index_page=names.INDEX_PAGE)
    return env


def write_report(report: Report, out_dir: Path, generated: str) -> Path:
    """Write index.html, one page per capsule, the suite pages and style.css; returns the index.
    `generated` is the footer line (time and versions), the only text gold tests scrub. The pages
    are written atomically, all of them or none (conformance/jsonfile.py:
    write_files_atomically); a write the machine refuses is an EnvironmentFailure."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = _environment()
    common = {"report": report, "generated": generated}
    pages = {names.INDEX_PAGE: env.get_template("index.html").render(**common)}
    capsule = env.get_template("capsule.html")
    for row in report.rows:
        pages[row.page] = capsule.render(row=row, **common)
    suite = env.get_template("suite.html")
    for page in report.suites:
        pages[page.page] = suite.render(suite=page, **common)
    if report.peers is not None:
        pages[report.peers.page] = env.get_template("peers.html").render(
            peers=report.peers, **common)
    if report.exhaustive is not None:
        pages[report.exhaustive.page] = env.get_template("exhaustive.html").render(
            exhaustive=report.exhaustive, **common)
    if report.devices is not None:
        pages[report.devices.page] = env.get_template("devices.html").render(
            devices=report.devices, **common)
    if report.flags is not None:
        pages[report.flags.page] = env.get_template("flags.html").render(
            flags=report.flags, **common)
    if report.gpus is not None:
        pages[report.gpus.page] = env.get_template("gpus.html").render(gpus=report.gpus, **common)
    style = (resources.files("reports") / "templates" / "style.css").read_bytes()
    # Every page to a synced temporary file first, then all renamed into place: a full disk
    # leaves the previous report whole (EnvironmentFailure), never a cut page.
    write_files_atomically({**{out_dir / name: text for name, text in pages.items()},
                            out_dir / "style.css": style}, "cannot write the report page")
    # Pages of capsules or suites no longer in the report would otherwise linger and be cited.
    for old in [*out_dir.glob("capsule-*.html"), *out_dir.glob("suite-*.html"),
                *out_dir.glob(names.PEERS_PAGE), *out_dir.glob(names.EXHAUSTIVE_PAGE),
                *out_dir.glob(names.FLAGS_PAGE), *out_dir.glob(names.GPUS_PAGE)]:
        if old.name not in pages:
            old.unlink()
    return out_dir / names.INDEX_PAGE
