"""The roofline fitted on measured GEMM cells, a lab peer (the fixed rooflines are the
product's: `steptime.rooflines`, in `steptime.peers.PRODUCT`).

* ``calibrated_roofline`` (a_c, a_m, t0) fitted per GPU on the cells it is then scored on
                          (IN-SAMPLE reference: the best any single 3-constant roofline does).

X: a DataFrame (or mapping) with columns m, n, k; latencies in milliseconds.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from steptime.peers import Entry
from steptime.rooflines import cells_mnk, roofline_ms


class CalibratedRoofline:
    """Best single roofline per GPU: (a_c, a_m, t0) fitted on the cells given (in-sample).

    Fitted by minimising the soft-L1 relative error, close to the MAPE it is scored on.
    """

    name = "calibrated_roofline"

    in_sample = True

    def __init__(self, gpu: str):
        self.gpu = gpu

    def fit(self, X, y):
        m, n, k = cells_mnk(X)
        y = np.asarray(y, dtype=float)

        def resid(v):
            return (roofline_ms(m, n, k, self.gpu, v[0], v[1], v[2]) - y) / y

        r = least_squares(resid, [0.7, 0.8, 3.0], bounds=([0.05, 0.05, 0.0], [1.5, 3.0, 100.0]),
                          loss="soft_l1", f_scale=0.02)
        self.a_c_, self.a_m_, self.t0_us_ = map(float, r.x)
        return self

    def predict(self, X) -> np.ndarray:
        m, n, k = cells_mnk(X)
        return roofline_ms(m, n, k, self.gpu, self.a_c_, self.a_m_, self.t0_us_)


PEER_ENTRIES = (Entry.of(CalibratedRoofline, query="gemm",
                         fitted_on="(a_c, a_m, t0) fitted per GPU on the cells it is then scored on "
                                   "(in-sample reference)"),)
