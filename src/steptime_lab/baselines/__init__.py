"""The lab's table-fitted peers: importing this package registers them in `steptime.peers`
(`calibrated_roofline`, `vidur_rf`, `vidur_poly`), beside the product's own peers.

    from steptime import peers
    import steptime_lab.baselines  # noqa: F401  (registers the lab's peers)
    est = peers.make("vidur_rf", features=["num_tokens"], full_grid=False, seed=0)
    est.fit(X, y)            # X: pandas DataFrame of cells, y: measured latency_ms
    est.predict(X) -> np.ndarray of latency_ms

scikit-learn style: constructor arguments stored as given, learned state in attributes
ending with '_', no hidden state.
"""

from __future__ import annotations

from steptime_lab.baselines import roofline, vidur_rf  # noqa: F401  (registers their peers)
