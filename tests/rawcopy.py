"""Scratch copies of raw files for the loader tests (imported by tests/test_data_loaders.py,
tests/test_wallclock_data.py and tests/test_moe_data.py; pytest puts tests/ on sys.path): a scratch
root (`mini_root`), an edited table written back in its own format (`rewrite`), and the manifest
entry re-recorded (`rerecord`)."""
import hashlib
import shutil
from pathlib import Path

import yaml


def mini_root(tmp_path: Path, repo_root: Path, paths: list[str], units: dict | None = None) -> Path:
    """A scratch repository root holding copies of `paths` and a manifest listing just them
    (`units`: path -> unit entries laid over the manifest's, to test a unit check)."""
    man = yaml.safe_load((repo_root / "raw/MANIFEST.yaml").read_text())
    keep = [dict(e) for e in man["files"] if e["path"] in paths]
    assert len(keep) == len(paths)
    for e in keep:
        dst = tmp_path / e["path"]
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(repo_root / e["path"], dst)
        if units and e["path"] in units:
            e["units"] = {**e["units"], **units[e["path"]]}
    man["files"] = keep
    (tmp_path / "raw/MANIFEST.yaml").write_text(yaml.safe_dump(man, sort_keys=False))
    return tmp_path


def rerecord(path: Path) -> None:
    """Record `path`'s new size and sha256 in its scratch manifest, as re-vendoring an edited file
    would: the checksum then passes, and only the loader's own checks can catch the edit."""
    root = next(d for d in path.parents if (d / "raw/MANIFEST.yaml").is_file())
    man = yaml.safe_load((root / "raw/MANIFEST.yaml").read_text())
    rel = path.relative_to(root).as_posix()
    for e in man["files"]:
        if e["path"] == rel:
            e["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
            e["bytes"] = path.stat().st_size
    (root / "raw/MANIFEST.yaml").write_text(yaml.safe_dump(man, sort_keys=False))


def rewrite(path: Path, edit, *, record: bool = True) -> None:
    """Read the table at `path` (CSV or parquet, by its ending), apply `edit` (it changes the frame
    in place, or returns the new one) and write it back in the same format; with `record`, record
    the new checksum (`rerecord`), so only the loader's own checks can catch the edit."""
    import pandas as pd

    path = Path(path)
    parquet = path.suffix == ".parquet"
    df = pd.read_parquet(path) if parquet else pd.read_csv(path)
    out = edit(df)
    df = df if out is None else out
    (df.to_parquet if parquet else df.to_csv)(path, index=False)
    if record:
        rerecord(path)


def set_at(row: int, column: str, value):
    """An edit for `rewrite`: one cell set to `value` (or to `value(frame)` when it is callable)."""

    def edit(df):
        df.loc[row, column] = value(df) if callable(value) else value

    return edit
