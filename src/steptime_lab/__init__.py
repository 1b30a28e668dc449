"""steptime's laboratory: the paper's pipeline around the predictor.

Data loaders (raw -> checked tidy tables), evaluations, experiments (fit, score, claims,
figures), baselines that need tables to fit, the audit trail (status, audit, README numbers).
The lab imports the product (`steptime`); the product never imports the lab.
"""
