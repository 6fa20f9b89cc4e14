"""The xp-generic engine core on CuPy: dummy weights, quantizers and dequantizers give the
very bits NumPy gives (so GPU-vs-NumPy tests compare identical weights). Needs a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from engine import quants
from engine.models import load_weights

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():  # noqa: ANN201
    return pytest.importorskip("cupy")


@pytest.mark.parametrize(
    "name", ["tiny:f32", "tiny:f16", "tiny:q8_0", "tiny:q4_0", "tiny-qwen3:q4_1", "tiny-qwen3:q8_0"]
)
def test_dummy_weights_are_bit_identical_on_the_gpu(cp, name: str) -> None:  # noqa: ANN001
    host, dev = load_weights(name, np), load_weights(name, cp)
    assert host.model_id == dev.model_id
    for n, t in host.tensors.items():
        d = dev.tensors[n]
        assert isinstance(d.data, cp.ndarray), n
        assert (d.ggml_type, d.shape, d.data.dtype, d.data.shape) == (
            t.ggml_type, t.shape, t.data.dtype, t.data.shape
        ), n  # fmt: skip
        assert np.array_equal(cp.asnumpy(d.data).view(np.uint8), t.data.view(np.uint8)), n


@pytest.mark.parametrize("ggml_type", ["Q8_0", "Q4_0", "Q4_1"])
def test_quants_are_bit_identical_on_the_gpu(cp, ggml_type: str) -> None:  # noqa: ANN001
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((64, 256)) * rng.uniform(1e-3, 1e3, (64, 1))).astype(np.float32)
    x[0, :32] = 0
    q_host = quants.quantize(x, ggml_type, np)
    q_dev = quants.quantize(cp.asarray(x), ggml_type, cp)
    assert np.array_equal(cp.asnumpy(q_dev), q_host)
    raw = rng.integers(0, 256, size=(32, quants.bytes_per_row(ggml_type, 256)), dtype=np.uint8)
    with np.errstate(all="ignore"):
        host = quants.dequantize(raw, ggml_type, np)
    dev = cp.asnumpy(quants.dequantize(cp.asarray(raw), ggml_type, cp))
    # random bytes make NaN scales: the GPU writes its canonical NaN, not NumPy's payload
    nan = np.isnan(host)
    assert np.array_equal(np.isnan(dev), nan)
    assert np.array_equal(dev[~nan].view(np.uint32), host[~nan].view(np.uint32))


def test_big_dummy_model_builds_on_the_gpu(cp) -> None:  # noqa: ANN001
    """llama-8b:q4_0 is made on the device with finite, nonzero block scales."""
    w = load_weights("llama-8b:q4_0", cp)
    assert len(w.tensors) == 2 + 1 + 9 * 32
    embd = w.tensors["token_embd.weight"].data
    assert embd.shape == (128256, 4096 // 32 * 18)
    d = embd[:, ::18].astype(cp.uint16) | (embd[:, 1::18].astype(cp.uint16) << 8)
    d = d.view(cp.float16)
    assert bool(cp.all(cp.isfinite(d))) and bool(cp.all(d != 0))
