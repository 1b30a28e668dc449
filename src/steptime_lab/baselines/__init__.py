"""The lab's table-fitted peers (`calibrated_roofline`, `vidur_rf`, `vidur_poly`): their entries,
and `REGISTRY`, the product's peers plus these (an immutable `steptime.peers.Registry` value;
importing this package changes nothing in `steptime.peers`).

    from steptime_lab.baselines import REGISTRY
    est = REGISTRY.make("vidur_rf", features=["num_tokens"], full_grid=False, seed=0)
    est.fit(X, y)            # X: pandas DataFrame of cells, y: measured latency_ms
    est.predict(X) -> np.ndarray of latency_ms

scikit-learn style: constructor arguments stored as given, learned state in attributes
ending with '_', no hidden state.
"""

from __future__ import annotations

from steptime import peers
from steptime_lab.baselines import roofline, vidur_rf

PEER_ENTRIES = (*roofline.PEER_ENTRIES, *vidur_rf.PEER_ENTRIES)
REGISTRY = peers.PRODUCT.with_peers(*PEER_ENTRIES)
