"""Audits of kernels in the 16-bit storage formats, bfloat16 and float16 (the engine itself stays
float32): the formats and their correctly rounded references (formats.py, refs.py) and the
exhaustive sweep of a unary kernel over all 2^16 inputs of its format (sweep.py)."""
