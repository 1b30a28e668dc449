"""Write the all-reduce (E1.25) and fp8 GEMM (E1.27) constants into defaults.yaml (with provenance)."""
import json

from steptime.calibration import update_defaults
from steptime.io import write_json

updates = []
for path in (snakemake.input.e1_25, snakemake.input.e1_27):
    with open(path) as fh:
        updates.extend(json.load(fh)["defaults_updates"])
update_defaults(updates)
write_json(snakemake.output.stamp, {"written": sorted({f"{u['scope']}:{u['name']}" for u in updates}),
                                    "from": [str(snakemake.input.e1_25), str(snakemake.input.e1_27)]})
