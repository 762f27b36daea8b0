"""`python -m reports`: the `torchlean-report` command (reports/cli.py)."""
import sys

from reports.cli import main

sys.exit(main())
