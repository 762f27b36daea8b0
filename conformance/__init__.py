"""The conformance harness: mpmath references, error models, fuzz campaigns and evidence records."""
