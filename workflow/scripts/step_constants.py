"""Write the constants E1.24, E1.1c and E1.4 settled into defaults.yaml (with provenance)."""
import json

from steptime.calibration import update_defaults
from steptime.io import write_json

updates = []
for path in (snakemake.input.e1_24, snakemake.input.e1_1c, snakemake.input.e1_4):
    with open(path) as fh:
        updates.extend(json.load(fh)["defaults_updates"])
update_defaults(updates)
write_json(snakemake.output.stamp, {"written": sorted({f"{u['scope']}:{u['name']}" for u in updates}),
                                    "from": [str(p) for p in snakemake.input]})
