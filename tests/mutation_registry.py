"""Every planted bug and every correct kernel of the mutation suite, in one table each:
tests/test_mutations.py's own (issues 17-20) and those of issue 35's classes, kept in their own
modules (tests/test_mutations_<topic>.py). scripts/mutation_table.py and the GPU suite
(tests/test_cuda_mutations.py) read these; each CPU test module runs its own table."""
from __future__ import annotations

import test_mutations as T
import test_mutations_composites as C
import test_mutations_history as H
import test_mutations_sums as S

TABLES = ((T.MUTANTS, T.CORRECT), (H.MUTANTS_HISTORY, H.CORRECT_HISTORY),
          (S.MUTANTS_SUMS, S.CORRECT_SUMS), (C.MUTANTS_COMPOSITES, C.CORRECT_COMPOSITES))
MUTANTS = {k: v for mutants, _ in TABLES for k, v in mutants.items()}
CORRECT = {k: v for _, correct in TABLES for k, v in correct.items()}

# Kernels whose bug acts on the memory they are handed (an in-place rewrite of the input, a read
# through the data pointer): on the GPU they take the CuPy arrays themselves, never host copies.
DEVICE_AWARE = {"abs_canonicalises_the_nans_of_its_input",
                "max_canonicalises_the_nans_of_its_second_input",
                "add_reads_both_operands_from_their_aligned_base",
                "concat_reads_its_last_input_from_its_aligned_base"}

assert len(MUTANTS) == sum(len(m) for m, _ in TABLES), "planted bug names must be unique"
assert len(CORRECT) == sum(len(c) for _, c in TABLES), "correct kernel names must be unique"
assert DEVICE_AWARE <= set(MUTANTS)
