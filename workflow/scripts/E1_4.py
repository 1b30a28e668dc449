"""E1.4: host floor S(N) = a + b(N-1) and its parts, against the GPU work of a decode step."""
from os.path import splitext

from steptime import data
from steptime.experiments import host as E
from steptime.results import provenance, write_result
from steptime.calibration import use_settled

use_settled(snakemake.input.settled)  # this run's settled constants (declared inputs)
cfg = snakemake.config
x = E.tidy(data.load_vidur_cpu_overheads())
r = E.run(x, seed=cfg["seed"], n_boot=cfg["bootstrap"])
doc = E.document(r, x)
prov = provenance([snakemake.input.data], config=cfg, calibration=r["calibration"].to_dict(), rule="E1_4",
                  script="workflow/scripts/E1_4.py")
write_result(snakemake.output.result, id="E1.4", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov, extra={"defaults_updates": E.defaults_updates(r["per_gpu"])})
E.plot(r, x, doc, splitext(snakemake.output.fig)[0],
       "E1.4: measured host time per engine step (Vidur, Sarathi-Serve) against batch size per model and TP, "
       "with the held-out S(N) + Ray + sampler lines; right: host time over predicted GPU work of the same decode step.")
