"""Count how many of test_validation's bad inputs are handled cleanly (issue 12's tally).

    python tests/validation_probe.py [--skip-huge] [--lenient]

Clean: the Python API raises a SteptimeError that is also a ValueError, with a one-line
message (an MoE config: one that says "MoE"); the CLI exits 2 with one line on stderr and no
traceback. Anything else (a result, another exception, a traceback) is not clean. The needles
test_validation.py checks are not required here, so older code is scored on the same ground.
`--lenient` also counts a plain ValueError or KeyError with a one-line message.
`--skip-huge` scores the per-request-allocating inputs as not clean without running them
(older code hangs on them).
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_validation as T  # noqa: E402

from steptime import predict_ops, predict_step  # noqa: E402
from steptime.cli import main  # noqa: E402
from steptime.errors import SteptimeError  # noqa: E402
from steptime.specs import Model, get_model  # noqa: E402
from steptime.step import predict_steps  # noqa: E402

HUGE = ("10000000000x1024", 10**12)


LENIENT = "--lenient" in sys.argv  # also count a plain ValueError/KeyError with a one-line message


def api_clean(fn, needle: str | None = None) -> bool:
    try:
        fn()
    except (SteptimeError, ValueError, KeyError) as e:
        typed = isinstance(e, SteptimeError) and isinstance(e, ValueError)
        return (typed or LENIENT) and "\n" not in str(e) and (needle is None or needle in str(e))
    except BaseException:  # noqa: BLE001 - anything else is a defect here
        return False
    return False


def cli_clean(argv) -> bool:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(list(argv))
        except SystemExit as exc:
            rc = exc.code
        except BaseException:  # noqa: BLE001
            return False
    text = err.getvalue()
    return rc == 2 and text.count("\n") == 1 and "Traceback" not in text


def cases(skip_huge: bool):
    tmp = Path(tempfile.mkdtemp())

    def config(content: bytes) -> str:
        p = tmp / f"c{len(list(tmp.iterdir()))}" / "config.json"
        p.parent.mkdir()
        p.write_bytes(content)
        return str(p)

    def huge(x) -> bool:
        return skip_huge and any(str(h) in repr(x) for h in HUGE)

    for argv, _ in T.BAD_CLI + T.BAD_EVALUATE:
        yield "cli", " ".join(argv), (lambda a=argv: False) if huge(argv) else (lambda a=argv: cli_clean(a))
    for kw, _, _ in T.BAD_STEP:
        yield "predict_step", repr(kw)[:70], (lambda: False) if huge(kw) else (
            lambda k=kw: api_clean(lambda: predict_step(T.M, T.G, **k)))
    for i, (make, _) in enumerate(T.BAD_BATCHES):
        yield "Batch", f"BAD_BATCHES[{i}]", lambda m=make: api_clean(m)
    for model, gpu, _, _ in T.BAD_NAMES:
        yield "names", f"{model!r} {gpu!r}", lambda m=model, g=gpu: api_clean(
            lambda: predict_step(m, g, decode=[(1, 16)]))
    for op, cells, _ in T.BAD_OPS:
        yield "predict_ops", f"{op} {cells!r}"[:70], lambda o=op, c=cells: api_clean(
            lambda: predict_ops(o, "h100-sxm", **c))
    yield "predict_ops", "unknown gpu", lambda: api_clean(lambda: predict_ops("gemm", "h1000", m=1, n=1, k=1))
    for kw, _ in T.BAD_STEPS:
        yield "predict_steps", repr(kw)[:70], lambda k=kw: api_clean(lambda: predict_steps(T.M, T.G, **k))
    for content, _ in T.BAD_CONFIGS:
        yield "config.json", repr(content)[:70], lambda c=content: api_clean(lambda: get_model(config(c)))
    for content in T.MOE_CONFIGS:
        yield "config.json MoE", repr(content)[-60:], lambda c=content: api_clean(lambda: get_model(config(c)), "MoE")
    for content in (T.BAD_CONFIGS[0][0], T.MOE_CONFIGS[0], b"\xff"):
        yield "cli config", repr(content)[:60], lambda c=content: cli_clean(
            ["predict", "--model", config(c), "--gpu", "h100", "--decode", "1x16"])
    from dataclasses import asdict

    for field, value in T.BAD_MODEL_FIELDS:
        d = dict(asdict(get_model(T.M)), **{field: value})
        yield "Model()", f"{field}={value!r}", lambda d=d: api_clean(lambda: Model(**d))
    from steptime_lab.evaluate import evaluate

    for gpus in T.BAD_EVALUATE_GPUS:
        yield "evaluate()", repr(gpus), lambda g=gpus: api_clean(lambda: evaluate("host", g))
    yield "predict_step", "fp8 KV batch that fits (memory check ignoring --kv-dtype)", lambda: _fits_with_fp8()


def _fits_with_fp8() -> bool:
    try:
        return predict_step(T.M, "l40s", kv_dtype="fp8", decode=[(64, 5000)]).requests == 64
    except BaseException:  # noqa: BLE001
        return False


def run(skip_huge: bool = False) -> dict:
    by_kind: dict[str, list[int]] = {}
    unclean = []
    for kind, label, fn in cases(skip_huge):
        ok = bool(fn())
        tally = by_kind.setdefault(kind, [0, 0])
        tally[0] += 1
        tally[1] += ok
        if not ok:
            unclean.append(f"{kind}: {label}")
    tried = sum(t[0] for t in by_kind.values())
    return {"tried": tried, "clean": sum(t[1] for t in by_kind.values()),
            "by_kind": {k: {"tried": t[0], "clean": t[1]} for k, t in by_kind.items()}, "not_clean": unclean}


if __name__ == "__main__":
    print(json.dumps(run("--skip-huge" in sys.argv), indent=1))
