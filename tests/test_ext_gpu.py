"""On a GPU box: a build in auto mode measures a missing result with the real bench runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from gemm_bench.question.question import build_question
from gemm_bench.results.cache import Cache


@pytest.mark.gpu
@pytest.mark.sphinx("html", testroot="gpu", srcdir="gpu-auto")
def test_auto_mode_measures_on_the_real_gpu(app, warning):
    import torch

    app.build()
    assert "WARNING" not in warning.getvalue(), warning.getvalue()
    [doc] = Cache(Path(app.srcdir) / "_gemm_cache").lookup(build_question(shapes=["1024x1024x1024"]).hash).documents
    assert doc["device"]["name"] == torch.cuda.get_device_name()
    soup = BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")
    assert soup.select_one("div.gemm-benchmark#tiny table.gemm-gemms") is not None
