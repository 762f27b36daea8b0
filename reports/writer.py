"""Renders the report model to static HTML with jinja2 (autoescape on; data is never marked
safe) and copies the stylesheet. Pages read without JavaScript."""
from __future__ import annotations

import functools
import math
import re
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


LONG_PIECE = 24     # characters: a longer piece (a replay file's name) may also wrap at a hyphen


def break_points(name: str) -> list[str]:
    """`name` cut after each space, `/` and `.` (not a decimal point: `1.5e-07` holds together),
    so a template can put <wbr> between the (still escaped) pieces: long capsule names, paths and
    commands wrap at their joints, never inside a word (`reference.reduce_s um`) nor at an
    underscore; a piece longer than LONG_PIECE also after its hyphens
    (`scaled_dot_product_attention-special-1.json`, a replay file)."""
    parts = []
    for p in re.split(r"(?<=[ /])|(?<=\.)(?=[A-Za-z_])", str(name)):
        parts += re.split(r"(?<=-)(?=[A-Za-z0-9])", p) if len(p) > LONG_PIECE else [p]
    return [p for p in parts if p] or [""]


# letters, digits and punctuation a browser never breaks at or beside: no nowrap span needed
_PLAIN = re.compile(r"[A-Za-z0-9_(),;:'`\"\[\]]*[./]?")


def pieces(text) -> list[tuple[str, bool, str]]:
    """`text` as (piece, plain, after) for macros.wrap: a piece is a word or a name's part
    (break_points); `plain` when nothing inside it could break, so it needs no nowrap span;
    `after` is the white space that follows it, "wbr" for a joint inside a word (after `.`,
    `/`, or a long piece's hyphen), or "". The text reads back exactly (spaces kept)."""
    out = []
    for word, space in re.findall(r"(\S+)(\s*)", str(text)):
        parts = break_points(word)
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            out.append((part, bool(_PLAIN.fullmatch(part)), space if last else "wbr"))
    lead = re.match(r"\s*", str(text)).group()
    return ([(lead, True, "")] if lead else []) + out


_MORE = re.compile(r"\.\.\. (\d+) more")


def bits_label(bits: list[str]) -> str:
    """What an input's listed elements are: `7 float32, hex bits`, or for a cut list (the
    record keeps the first 16 and `... N more`) `16 of 255 float32 shown, hex bits`."""
    more = next((int(m.group(1)) for b in bits[-1:] if (m := _MORE.fullmatch(b))), 0)
    shown = len(bits) - (1 if more else 0)
    if bits and all(b in ("T", "F") for b in bits):
        return f"{shown} mask elements, T/F"
    if more:
        return f"{shown} of {shown + more} float32 shown, hex bits"
    return f"{shown} float32, hex bits"


def over_bound(v) -> bool:
    """Beyond the bound: a ratio over 1, inf or nan, or a NaN or inf mismatch by name."""
    if isinstance(v, str) and v.endswith(" mismatch"):
        return True
    return v in ("inf", "nan") or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                   and v > 1)


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    # One environment per process: jinja2 compiles each template once and caches it there.
    env = jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(num=num, full=full, f32=f32, break_points=break_points,
                       bits_label=bits_label, pieces=pieces, peer_page=names.peer_page)
    env.tests.update(over_bound=over_bound, shortened=shortened)
    env.globals.update(histogram=charts.histogram, distribution=charts.distribution,
                       numerical_policy_meaning=numerical_policy_meaning, fixed_class_label=FIXED_CLASS_LABEL,
                       suite_pages=names.SUITE_PAGES, index_page=names.INDEX_PAGE,
                       peers_page=names.PEERS_PAGE)
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
        for peer in report.peers.peer_pages:
            pages[peer.page] = env.get_template("peer.html").render(peer=peer, **common)
    if report.exhaustive is not None:
        pages[report.exhaustive.page] = env.get_template("exhaustive.html").render(
            exhaustive=report.exhaustive, **common)
    if report.lowp is not None:
        pages[report.lowp.page] = env.get_template("lowp.html").render(lowp=report.lowp, **common)
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
                *out_dir.glob(names.PEERS_PAGE), *out_dir.glob(names.PEER_PAGE_GLOB),
                *out_dir.glob(names.EXHAUSTIVE_PAGE),
                *out_dir.glob(names.LOWP_PAGE),
                *out_dir.glob(names.FLAGS_PAGE), *out_dir.glob(names.GPUS_PAGE)]:
        if old.name not in pages:
            old.unlink()
    return out_dir / names.INDEX_PAGE
