"""Loaders read raw/ only as raw/MANIFEST.yaml records it: a changed byte, a manifest cut short
or a deleted file stops the load with one line naming the file (each on a scratch copy)."""

from __future__ import annotations

import os
import shutil

import pytest
import yaml

from steptime_lab import data
from steptime_lab.data import manifest as M
from steptime_lab.data.verify import verify
from steptime.errors import DataError

GEMM_L40S = "raw/aiconfigurator/l40s/gemm/vllm/0.24.0/gemm_perf.bf16.parquet"
GEMM_H100 = "raw/aiconfigurator/h100_sxm/gemm/vllm/0.24.0/gemm_perf.bf16.parquet"
TRACE_CONV = "raw/vidur/processed_traces/splitwise_conv.csv"


@pytest.fixture()
def root(tmp_path, repo_root):
    """A scratch root with two GEMM tables, one trace and the manifest listing exactly them."""
    man = yaml.safe_load((repo_root / "raw/MANIFEST.yaml").read_text())
    man["files"] = [e for e in man["files"] if e["path"] in (GEMM_L40S, GEMM_H100, TRACE_CONV)]
    assert len(man["files"]) == 3
    for e in man["files"]:
        (tmp_path / e["path"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(repo_root / e["path"], tmp_path / e["path"])
    (tmp_path / "raw/MANIFEST.yaml").write_text(yaml.safe_dump(man, sort_keys=False))
    return tmp_path


def test_intact_copy_loads(root):
    assert set(data.load_aic_gemm(root=root)["gpu"]) == {"l40s", "h100-sxm"}


def test_flipped_byte_is_refused_naming_the_file(root):
    data.load_aic_gemm("l40s", root=root)  # read (and its digest cached) while intact
    p = root / GEMM_L40S
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x01  # same size: only the sha256 can tell
    p.write_bytes(bytes(b))
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # an edit moves the mtime
    with pytest.raises(DataError) as ei:
        data.load_aic_gemm("l40s", root=root)
    msg = str(ei.value)
    assert msg.startswith(f"{GEMM_L40S}: sha256 ") and "does not match raw/MANIFEST.yaml" in msg
    assert "\n" not in msg
    data.load_aic_gemm("h100-sxm", root=root)  # the other, intact table still loads


def test_truncated_manifest_is_refused_naming_the_unlisted_file(root):
    man = yaml.safe_load((root / "raw/MANIFEST.yaml").read_text())
    man["files"] = [e for e in man["files"] if e["path"] != GEMM_H100]  # cut short
    (root / "raw/MANIFEST.yaml").write_text(yaml.safe_dump(man, sort_keys=False))
    with pytest.raises(DataError, match=rf"^{GEMM_H100}: file under raw/ that raw/MANIFEST.yaml does not list"):
        data.load_aic_gemm(root=root)  # not a silent build from the l40s subset
    with pytest.raises(DataError, match=GEMM_H100):
        data.load_traces(root=root)  # any loader: the manifest as a whole is not trusted


def test_deleted_file_is_refused_naming_it(root):
    (root / TRACE_CONV).unlink()
    with pytest.raises(DataError, match=rf"^{TRACE_CONV}: listed in raw/MANIFEST.yaml but missing"):
        data.load_aic_gemm(root=root)


def test_wrong_size_is_refused_before_reading(root):
    p = root / TRACE_CONV
    p.write_text(p.read_text() + "\n")
    with pytest.raises(DataError, match=rf"^{TRACE_CONV}: \d+ bytes, raw/MANIFEST.yaml says \d+"):
        data.load_traces(root=root)


def test_entry_without_checksum_is_refused(root):
    man = yaml.safe_load((root / "raw/MANIFEST.yaml").read_text())
    for e in man["files"]:
        e.pop("sha256")
    (root / "raw/MANIFEST.yaml").write_text(yaml.safe_dump(man, sort_keys=False))
    with pytest.raises(DataError, match="records no sha256"):
        data.load_traces(root=root)


def test_digest_is_cached_per_path_mtime_size(root, monkeypatch):
    from steptime import io

    calls = []
    orig = io.sha256_file

    def counting(path, *a, **kw):
        calls.append(str(path))
        return orig(path, *a, **kw)

    monkeypatch.setattr(io, "sha256_file", counting)
    io._cached_sha256.cache_clear()
    data.load_traces(root=root)
    data.load_traces(root=root)
    assert calls.count(str(root / TRACE_CONV)) == 1  # hashed once per process
    p = root / TRACE_CONV
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    data.load_traces(root=root)
    assert calls.count(str(root / TRACE_CONV)) == 2  # a touched file is hashed again


def test_collected_telemetry_is_not_a_cut_manifest_but_verify_lists_it(root):
    t = root / "raw/telemetry/clock/h100-sxm/clock_sweep.csv"
    t.parent.mkdir(parents=True)
    t.write_text("gpu\nh100-sxm\n")
    data.load_traces(root=root)  # written by a collection rule, read by steptime_collect
    rep = verify(root, schema=False)
    assert any(p.path == "raw/telemetry/clock/h100-sxm/clock_sweep.csv" for p in rep.problems)
