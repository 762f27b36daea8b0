"""Removes the kernel process's import guard and patches the harness's comparison, its check of a
case and its verdict to always pass: in its own process, which is not where the judge runs."""
import sys

from tests.hostile._common import entry, wrong_abs

sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "__name__", "") != "JudgeImportGuard"]
import conformance.campaign as campaign  # noqa: E402
import conformance.error_models as error_models  # noqa: E402

error_models.compare = lambda *a, **k: (_ for _ in ()).throw(SystemError("never called"))
campaign.check_case = lambda *a, **k: campaign.CaseResult()
campaign._judge = lambda *a, **k: None

ENTRIES = entry("patch_comparison", wrong_abs)
