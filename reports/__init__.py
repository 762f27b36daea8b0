"""HTML evidence reports and the TRUST_BOUNDARIES.md capsule table.

Layers as in coverage.py's HTML report: model.py (plain dataclasses, filled only from evidence
records), builder.py and suites.py (evidence directories -> model), charts.py (SVG geometry),
writer.py (jinja2 templates in templates/, autoescaped), render.py (the `report` command) and
trust_boundaries.py (the `trust-boundaries` command). names.py holds every page and anchor name.
"""
