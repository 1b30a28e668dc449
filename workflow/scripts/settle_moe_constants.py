"""The shipped MoE constants (calibration/moe.yaml) from E3.1's, E3.2's and E3.3's fragments."""
import yaml

from steptime_lab.experiments import moe as E
from steptime.io import atomic_path, read_yaml

k = read_yaml(snakemake.input.kernel)
a = read_yaml(snakemake.input.a2a)
m = read_yaml(snakemake.input.mla)
with atomic_path(snakemake.output.constants) as tmp:
    tmp.write_text(yaml.safe_dump(E.settle(k, a, m), sort_keys=False))
