"""plotting.save: the PDF is cut to the PNG's tight box (one tight box and one layout pass per figure, not one per
format; build time, wave 37); the PNG is saved as before."""
import io
import re
import struct
import zlib

import pytest

from steptime import plotting


def _figure():
    fig, ax = plotting.subplots(figsize=(6, 3))
    ax.plot([1, 2, 3], [3, 1, 2], label="a long legend entry placed outside the axes")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set_title("a title", fontsize=16)
    ax.set_ylabel("a label far to the left", labelpad=30)
    return fig


def _png_size(data: bytes):
    return struct.unpack(">II", data[16:24])


def _pdf_box(data: bytes):
    m = re.search(rb"/MediaBox \[\s*([-\d.]+) ([-\d.]+) ([-\d.]+) ([-\d.]+)\s*\]", data)
    x0, y0, x1, y1 = map(float, m.groups())
    return x1 - x0, y1 - y0


def test_the_pdf_takes_the_pngs_tight_box(tmp_path):
    fig = _figure()
    plotting.save(fig, tmp_path / "f")
    png, pdf = (tmp_path / "f.png").read_bytes(), (tmp_path / "f.pdf").read_bytes()
    dpi = plotting.setup().rcParams["savefig.dpi"]
    w_px, h_px = _png_size(png)
    w_pt, h_pt = _pdf_box(pdf)
    # the PDF's page is the PNG's box (the PNG rounds it to whole pixels at savefig.dpi)
    assert w_pt == pytest.approx(w_px / dpi * 72, abs=72 / dpi)
    assert h_pt == pytest.approx(h_px / dpi * 72, abs=72 / dpi)
    assert (w_pt, h_pt) != pytest.approx((6 * 72, 3 * 72), abs=5)  # a tight box, not the figure's size


def test_the_png_is_what_savefig_tight_writes_and_one_tight_box_serves_both(tmp_path, monkeypatch):
    import matplotlib.figure

    fig = _figure()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None}, bbox_inches="tight")
    calls = []
    real = matplotlib.figure.Figure.get_tightbbox

    def counted(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "get_tightbbox", counted)
    fig2 = _figure()
    plotting.save(fig2, tmp_path / "g")
    assert len(calls) == 1  # the PNG's; the PDF reuses it
    assert "get_tightbbox" not in vars(fig2)  # the figure's own method is back
    assert (tmp_path / "g.png").read_bytes() == buf.getvalue()
    assert (tmp_path / "g.pdf").read_bytes().startswith(b"%PDF")
