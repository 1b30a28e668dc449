"""Input checks shared by the public entry points (predict_step, predict_steps, predict_ops,
model configs, the CLI). Each check raises `InputError` (a `SteptimeError` and a `ValueError`)
with one line that names the argument and the value it got.

The limits every entry point enforces live here, in one place:

- MAX_REQUESTS: requests in one engine step. ASSUMED: far above any serving engine's
  per-step cap (vLLM's max_num_seqs defaults to 256-1024; SGLang and TensorRT-LLM are
  alike), so no real batch meets it, while a typo such as `--decode 10000000000x1024` is
  refused before anything is allocated per request.
- MAX_DIM: the largest model dimension (hidden size, heads, layers, vocabulary, positions)
  a model config may give. DERIVED: GPU kernels index a dimension with 32-bit integers, so
  2**31 - 1 bounds every real one (Llama-4 Scout's 10M positions is far below it).
- F_CLK_MAX_BOOST: the largest clock ratio (sustained / datasheet boost clock) accepted
  with `allow_boost`. ASSUMED: an overclocked part, or a datasheet that understates the
  clock it reaches, stays well under twice the rated boost clock.
- F_CLK_MIN: the smallest clock ratio accepted. DERIVED from specs/gpus.yaml's clocks: the
  lowest application clock NVIDIA's data-centre parts accept (210 MHz, `nvidia-smi -q -d
  SUPPORTED_CLOCKS` on A100/H100) is 0.07-0.15 of their boost clock, so 0.05 is below every
  real setting, while 1e-300 (which gives an infinite step time) is refused.
- MAX_TOKENS: the largest token count (prompt, output, KV length, new tokens) anything
  accepts: MAX_DIM, since no model's context reaches it; checked before any integer cast,
  so 10**30 is refused instead of overflowing an int64.
- MAX_INSTANCES: the most GPUs (or engine instances) one simulated deployment spans: serve's --replicas and
  disaggregated pools, plan's --max-gpus. ASSUMED: above any single serving deployment steptime's planner prices
  (its layouts are of one model on one GPU type), while a typo such as --replicas 10**20 is refused before numpy
  sees it.
- MAX_CONFIG_BYTES / MAX_TABLE_BYTES: the largest model config.json / settled-constants or
  trace file read. ASSUMED: a Hugging Face config.json is a few KB (Llama-3.1-405B's is
  under 1 KB), a settled constants file under 1 MB and a trace of 10**7 requests under 1 GB;
  `/dev/zero` or a FIFO is refused before it is read (not a regular file).
"""

from __future__ import annotations

import math
import stat
from numbers import Integral, Real
from pathlib import Path

import numpy as np

from steptime.errors import InputError

MAX_REQUESTS = 1_000_000
MAX_DIM = 2**31 - 1
MAX_TOKENS = MAX_DIM
F_CLK_MAX_BOOST = 2.0
F_CLK_MIN = 0.05
MAX_INSTANCES = 4096
MAX_CONFIG_BYTES = 4 << 20
MAX_SETTLED_BYTES = 64 << 20
MAX_TABLE_BYTES = 4 << 30


def _kind(x) -> str:
    return "None" if x is None else type(x).__name__


def is_real(x) -> bool:
    """Whether `x` is a finite real number: ints and floats (numpy's too) are; bools, strings, None, NaN and
    infinities are not (a bool is an int to Python, never a time or a fraction to steptime)."""
    return not isinstance(x, (bool, np.bool_)) and isinstance(x, Real) and math.isfinite(float(x))


def as_int(x, what: str, minimum: int | None = None, error=InputError) -> int:
    """`x` as a Python int: ints (also numpy's) and integral floats pass; bools, strings,
    None, NaN, infinities and fractions are refused, never truncated."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, Real):
        raise error(f"{what} must be an integer, got {x!r} ({_kind(x)})")
    if not isinstance(x, Integral):
        f = float(x)
        if not math.isfinite(f) or f != math.floor(f):
            raise error(f"{what} must be an integer, got {x!r}")
        x = int(f)
    v = int(x)
    if minimum is not None and v < minimum:
        raise error(f"{what} must be >= {minimum}, got {v}")
    return v


def check_array(x, what: str, *, minimum: float = 0.0, strict: bool = True, integral: bool = False,
                maximum: float | None = None) -> None:
    """Refuse a value or array of values that is not numeric, not finite, at or below
    (`strict`) / below `minimum`, above `maximum` (when given), or (`integral`) not a whole number. Cheap:
    vectorised."""
    if x is None:
        raise InputError(f"{what} is missing (got None)")
    try:
        a = np.asarray(x)
    except (TypeError, ValueError):  # a ragged nesting ([[1, 2], [3]]): numpy's multi-clause ValueError (wave 42)
        raise InputError(f"{what} must be a number or a regular array of numbers (rows of one length), got "
                         f"{x!r:.80}") from None
    if a.dtype.kind not in "iuf":
        if a.dtype.kind == "O":
            try:
                a = a.astype(float)
            except (TypeError, ValueError):
                raise InputError(f"{what} must be numbers, got {x!r:.80}") from None
        else:
            raise InputError(f"{what} must be numbers, got {x!r:.80} ({a.dtype})")
    if a.size == 0:
        raise InputError(f"{what} is empty")
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a)
        if bad.any():
            raise InputError(f"{what} must be finite, got {a[bad].flat[0]!r}")
    lo = a.min()
    if (lo <= minimum) if strict else (lo < minimum):
        rel = ">" if strict else ">="
        raise InputError(f"{what} must be {rel} {minimum:g}, got {lo!r}")
    if maximum is not None and a.max() > maximum:
        raise InputError(f"{what} must be <= {maximum:.15g}, got {a.max().item()!r}")
    if integral and a.dtype.kind == "f":
        frac = a != np.floor(a)
        if frac.any():
            raise InputError(f"{what} must be whole numbers, got {a[frac].flat[0]!r}")


def check_f_clk(f_clk, allow_boost: bool = False):
    """None (the model's own clock law) or a ratio in (0, 1]: sustained clock / datasheet
    boost clock, the clock the datasheet peak FLOP/s is quoted at. Above 1 (compute beyond
    the datasheet peak) only with allow_boost (CLI `--allow-boost`), up to F_CLK_MAX_BOOST."""
    if f_clk is None:
        return None
    if isinstance(f_clk, (bool, np.bool_)) or not isinstance(f_clk, Real):
        raise InputError(f"f_clk (--f-clk) must be a number in (0, 1], got {f_clk!r} ({_kind(f_clk)})")
    f = float(f_clk)
    if not math.isfinite(f) or f <= 0:
        raise InputError(f"f_clk (--f-clk) must be in (0, 1] (sustained / boost clock), got {f_clk!r}")
    if f < F_CLK_MIN:
        raise InputError(f"f_clk (--f-clk) {f_clk!r} is below {F_CLK_MIN:g} of the boost clock, lower than any "
                         f"clock a GPU runs at")
    if f > 1:
        if not allow_boost:
            raise InputError(f"f_clk (--f-clk) {f_clk!r} is above the datasheet boost clock (1.0): compute would "
                             f"run beyond the datasheet peak; pass allow_boost=True (--allow-boost) if the part "
                             f"really clocks higher")
        if f > F_CLK_MAX_BOOST:
            raise InputError(f"f_clk (--f-clk) {f_clk!r} is above {F_CLK_MAX_BOOST:g}x the boost clock even with "
                             f"allow_boost")
    return f_clk


def check_regular_file(path, what: str, max_bytes: int, error=InputError) -> Path:
    """`path` as a Path when it names a regular file of at most `max_bytes`; one line otherwise
    (missing, a directory, a device such as /dev/zero, a FIFO that would block, too large).
    Only stat() is called, so nothing is opened or read."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise error(f"{what} {str(p)!r}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{what} {str(p)!r}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if (
            stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)) else "a socket" if stat.S_ISSOCK(
            st.st_mode) else "not a regular file"
        raise error(f"{what} {str(p)!r}: {kind}, not a regular file")
    if st.st_size > max_bytes:
        raise error(f"{what} {str(p)!r}: {st.st_size} bytes, above the limit of {max_bytes} bytes for such a file")
    return p


def check_tokens(x, what: str, error=InputError) -> int:
    """A token count (or KV length) as an int in [0, MAX_TOKENS], checked before any cast."""
    v = as_int(x, what, 0, error)
    if v > MAX_TOKENS:
        raise error(f"{what} {v:.3g} is beyond any model's context (limit {MAX_TOKENS})")
    return v


def check_tp_heads(model, tp: int, error=InputError) -> int:
    """The one check that tensor parallelism splits `model`'s attention heads evenly (each GPU holds
    num_attention_heads / tp query heads): predict_step's batches, predict_steps, the serving timers and
    serve.memory.kv_budget call it, each with its own error class. `tp` is an int >= 1 already
    (step.check_tp)."""
    if model.num_attention_heads % tp:
        raise error(f"tensor-parallel degree {tp} must divide {model.key}'s {model.num_attention_heads} "
                    f"attention heads")
    return tp


def check_choice(value, what: str, known) -> str:
    if not isinstance(value, str) or value not in known:
        raise InputError(f"unknown {what} {value!r} (known: {', '.join(known)})")
    return value


def check_request_rows(new_tokens, kv_len, model, *, where: str, names=("new_tokens", "kv_len"), row: str = "row",
                       count=None, whole: bool = True, context: bool = True, error=InputError) -> None:
    """Per-request rows of a step (one entry per request, or per group of `count` alike requests): each
    `new_tokens` >= 1 and `kv_len` >= 0, both at most MAX_TOKENS; with `whole` whole numbers (a token count is
    never a fraction); with `context` KV + new tokens within `model`'s context window (its
    max_position_embeddings). The one check of `predict_step`'s batches and `predict_steps`' rows: the
    message names `where`, the field (`names`: the caller's words for new tokens and KV length), the value
    and the limit (`row`: what an entry is, "row" or "group"). Rows whose `count` is 0 are skipped. Vectorised (the fast path's cost is one pass)."""
    new = np.asarray(new_tokens)
    kv = np.asarray(kv_len)
    if count is not None:
        live = np.asarray(count) > 0
        new, kv = new[live], kv[live]
    if not len(new):
        return
    for name, a, lo in ((names[0], new, 1), (names[1], kv, 0)):
        low = a < lo
        if low.any():
            i = int(np.flatnonzero(low)[0])
            raise error(f"{where}: {name} must be >= {lo}, got {a[i].item()!r} ({row} {i})")
        top = float(a.max())
        if top > MAX_TOKENS:
            raise error(f"{where}: {name} {top:.3g} is beyond any model's context (limit {MAX_TOKENS})")
        if whole and a.dtype.kind == "f":
            frac = a != np.floor(a)
            if frac.any():
                i = int(np.flatnonzero(frac)[0])
                raise error(f"{where}: {name} must be whole numbers of tokens, got {a[i].item()!r} ({row} {i})")
    if context:
        ctx = int(model.max_position_embeddings)
        total = kv + new
        over = total > ctx
        if over.any():
            i = int(np.argmax(total))
            raise error(f"{where}: {names[1]} + {names[0]} = {total[i]:.15g} positions ({row} {i}: {names[1]} "
                        f"{kv[i]:.15g}, {names[0]} {new[i]:.15g}) exceed {model.key}'s context window: a maximum of "
                        f"{ctx} positions (max_position_embeddings)")


def check_known_fields(raw: dict, known, where: str, error=InputError) -> None:
    """Refuse a field of a hand-written mapping (a spec table's entry, a price) that its reader does not know: a
    misspelt field would otherwise be dropped without a word and the value it meant to set left at another. The
    message names the field, the closest known names and where it is."""
    import difflib

    known = tuple(known)
    bad = [k for k in raw if k not in known]
    if bad:
        k = bad[0]
        close = difflib.get_close_matches(str(k), known, n=2, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise error(f"{where}: unknown field {k!r} ({hint}known: {', '.join(sorted(known))})")


def check_bool(value, name: str, error=InputError) -> bool:
    """A flag given as True or False (a numpy bool too): a string such as "no" would otherwise read as true."""
    if not isinstance(value, (bool, np.bool_)):
        raise error(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)
