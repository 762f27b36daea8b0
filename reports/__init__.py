"""HTML evidence reports and the TRUST_BOUNDARIES.md capsule table.

Layers as in coverage.py's HTML report: reader.py (one evidence directory's files, each checked
against the structure in shapes.py with the small checker in jsonshape.py; an unusable file is
named, never raised), model.py (plain dataclasses, filled only from evidence records),
builder.py, trust_view.py and suites.py (evidence directories -> model; trust_view decides
freshness and earned trust from the build and the directory's trust.json), charts.py (SVG
geometry), writer.py (jinja2 templates in templates/, autoescaped), render.py (the `report`
command) and trust_boundaries.py (the `trust-boundaries` command), both under cli.py's
`torchlean-report` (`python -m reports`), which `torchlean-conformance` forwards to. names.py holds
every page and anchor name.
"""
