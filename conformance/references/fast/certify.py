"""The rounding certificate: when a DD's enclosure [V - rad, V + rad] (V = hi + lo) decides both the
float32 correct rounding (value) and the float64 correct rounding (exact) of the value it encloses.

float64. hi is the float64 nearest V (a normalised pair: |lo| <= ulp(hi)/2). In magnitudes (H = |hi|,
L = lo sign(hi)) every t in the enclosure lies in [H + L - rad, H + L + rad]; it rounds to hi when that
stays inside (H - below/2, H + above/2), below and above the float64 spacings under and over H (they
differ when H is a power of two). The tests compute (L + rad)(1 + 2^-50) and (rad - L)(1 + 2^-50),
upper bounds of the exact quantities despite their own rounding.

float32. r = RN32(V) is computed exactly by rounding.round_f64_pair_to_f32. Work with magnitudes
H = |hi| and L = lo sign(hi), and let m_lo < m_hi be the float32 rounding boundaries around |r|:
the midpoints to its float32 neighbours (0 below r = 0; for r = FLT_MAX the overflow threshold
2^128 (1 - 2^-25) above; for r = inf that threshold below and +inf above). Every midpoint is a float64.
Every t strictly between m_lo and m_hi rounds to r, whichever way ties go. The test asks
    fl(fl(H - m_lo) + L) >= 2 rad + 2^-100 H   and   fl(fl(m_hi - H) - L) >= 2 rad + 2^-100 H.
Proof for the lower side: d = H - m_lo >= 0 (m_lo <= V and rounding to float64 is monotone), the two
roundings give d' = d(1 + e1), s' = (d' + L)(1 + e2), |e1|, |e2| <= u = 2^-53, and |L| <= u H. Then
d + L >= s'/(1 + u)^2 - u^2 H >= (2 rad + 2^-100 H)(1 - 2u) - 2^-106 H > rad, so V - rad > m_lo; the
upper side is the mirror image. Hence every t in the enclosure lies strictly inside (m_lo, m_hi).
When H is a boundary itself (a midpoint reached exactly, decided by a tiny lo) both roundings are
exact, the margin is dropped and the test reads L >= 2 rad: for rad > 0 the enclosure lies strictly on
L's side; for rad = 0, V is the exact value and r = RN32(V) its correct rounding, ties included.

Both tests need hi nonzero, finite and at least FINAL_LO = 2^-1000 (a normal float64 whose lo part
keeps 74 bits below it, so the spacings above are what they say and a subnormal lo costs at most
2^-1075, inside RAD_FLOOR); an exact zero result is never certified here (its sign is the op's business). The float64
test implies the enclosure excludes 0, so a float32 result that underflows to zero keeps hi's sign,
as the exact path's rounding does.
"""

from __future__ import annotations

import numpy as np

from conformance import rounding
from conformance.references.fast.dd import DD

FINAL_LO = 2.0 ** -1000
_THRESHOLD = 2.0 ** 128 * (1 - 2.0 ** -25)  # the float32 overflow threshold (a midpoint, a float64)
_F32_MAX_BITS = np.uint32(0x7F7FFFFF)


def _f32_boundaries(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(m_lo, m_hi): the rounding boundaries around the float32 magnitudes r (float64 results)."""
    a = np.abs(r.astype(np.float32))
    bits = a.view(np.uint32)
    finite = np.isfinite(a)
    up_bits = np.where(finite & (bits < _F32_MAX_BITS), bits + np.uint32(1), bits)
    up = np.where(bits == _F32_MAX_BITS, 2.0 ** 128, up_bits.view(np.float32).astype(np.float64))
    down = np.where(bits > 0, (np.maximum(bits, np.uint32(1)) - np.uint32(1)).view(np.float32), np.float32(0))
    a64 = a.astype(np.float64)
    m_hi = np.where(finite, (a64 + up) / 2, np.inf)  # sums of adjacent float32 are exact in float64
    m_lo = np.where(finite, np.where(bits > 0, (a64 + down.astype(np.float64)) / 2, 0.0), _THRESHOLD)
    return m_lo, m_hi


def certify(x: DD) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value32, exact64, ok): the correct roundings of the enclosed values, valid where ok is True."""
    hi, lo, rad = x.hi, x.lo, x.rad
    with np.errstate(all="ignore"):
        # NumPy's float64 -> float32 conversion is the correct rounding of hi; it is that of hi + lo
        # unless hi is a float32 rounding boundary (then lo's sign decides): those few take the pair path
        value = hi.astype(np.float32)
        back = value.astype(np.float64)
        toward = np.where(hi > back, np.float32(np.inf), np.float32(-np.inf))
        other = np.nextafter(value, toward).astype(np.float64)
        tie = ((back != hi) & (back + other == 2 * hi)) | (np.abs(hi) == _THRESHOLD)
        t = np.flatnonzero(tie & (lo != 0))
        if t.size:
            value[t] = rounding.round_f64_pair_to_f32(hi[t], lo[t])
        h = np.abs(hi)
        inside = ~x.bad & np.isfinite(hi) & np.isfinite(rad) & (h >= FINAL_LO)
        below = h - np.nextafter(h, 0.0)
        above = np.nextafter(h, np.inf) - h
        ell = np.where(np.signbit(hi), -lo, lo)
        ok64 = ((ell + rad) * (1 + 2.0 ** -50) < above / 2) & ((rad - ell) * (1 + 2.0 ** -50) < below / 2)
        m_lo, m_hi = _f32_boundaries(value)
        on_edge = (h == m_lo) | (h == m_hi)  # then fl(H - m) = 0 and the sum is L itself: no margin
        need = 2 * rad + np.where(on_edge, 0.0, 2.0 ** -100 * h)
        ok32 = ((h - m_lo) + ell >= need) & ((m_hi - h) - ell >= need)
    return value, hi.copy(), inside & ok64 & ok32
