"""Write the all-reduce constants E1.25 settled into defaults.yaml (with provenance)."""
import json

from steptime.calibration import update_defaults
from steptime.io import write_json

with open(snakemake.input.e1_25) as fh:
    updates = json.load(fh)["defaults_updates"]
update_defaults(updates)
write_json(snakemake.output.stamp, {"written": sorted({f"{u['scope']}:{u['name']}" for u in updates}),
                                    "from": [str(snakemake.input.e1_25)]})
