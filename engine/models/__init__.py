"""Example models runnable from the `torchlean` command."""
