"""E3.1: the fused-MoE kernel term held out by GPU and dtype on AIConfigurator's vLLM MoE tables, and the same on
TensorRT-LLM's and SGLang's own fused-MoE tables (claims of their own); vLLM's laws are shipped, TensorRT-LLM's under
constants.frameworks.trtllm (read by engines whose moe.kernels is trtllm), SGLang's are not. Each engine's run is its
own job (E3_1_moe_engine.py, one part per engine); this merge documents the parts (moe_parts.read_parts refuses a
missing part or one built from other inputs)."""
import logging
from os.path import splitext

import yaml

from steptime_lab.experiments import moe as E
from steptime_lab.experiments.moe_parts import JOB_ORDER, parts_environment, read_parts
from steptime.io import atomic_path
from steptime_lab.results import rule_provenance, write_result

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(message)s", filemode="w")
parts = read_parts(dict(zip(JOB_ORDER, snakemake.input.parts)), data=snakemake.input.data)  # in ENGINES' order
r, trt, sgl = (p["run"] for p in parts)
doc = E.document_engines(r, [trt, sgl], target_pct=float(snakemake.params.target_pct))
logging.info("E3.1: %d cells scored; %d of %d groups met", doc["metrics"]["cells_scored"], doc["metrics"]["met"],
             doc["metrics"]["groups"])
cal = [c for cells in r["readings"].values() for c in cells]
prov = rule_provenance(snakemake, calibration={"readings": cal, "fits": r["fits"], "trtllm_fits": trt["fits"],
                                              "trtllm_readings": [c for v in trt["readings"].values() for c in v],
                                              "sglang_fits": sgl["fits"],
                                              "sglang_readings": [c for v in sgl["readings"].values() for c in v]},
                       script="workflow/scripts/E3_1_moe_kernel.py")
prov["environment"] = parts_environment(parts)  # the engines' processes computed the numbers, not this merge
write_result(snakemake.output.result, id="E3.1", question=snakemake.params.question, metrics=doc["metrics"],
             claims=doc["claims"], provenance=prov)
with atomic_path(snakemake.output.constants) as tmp:
    # vLLM's laws at the top level (unchanged); TensorRT-LLM's own, for engines that run its kernels (engines.yaml
    # moe.kernels), in their own namespace (wave 39, trtstep)
    tmp.write_text(yaml.safe_dump({**E.moe_constants_doc(r), "frameworks": {"trtllm": E.framework_constants_doc(trt)}},
                                  sort_keys=True))
E.plot(r, splitext(snakemake.output.fig)[0],
       "E3.1: fused-MoE kernel time (AIConfigurator, vLLM, balanced routing, the listed models' shapes, every "
       "moe_tp/moe_ep) measured vs predicted with the GPU held out (the law of its kernel family per dtype from the "
       "other GPUs, three bf16 readings of its own; collector regime: weight sets that fit L2 stay there); titles "
       "give the MAPE per dtype.", kind="kernel")
