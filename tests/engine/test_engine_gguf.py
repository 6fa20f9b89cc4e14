"""GGUF loading: the real file's metadata and layouts, and refusals of files we cannot run."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from engine.errors import EngineError
from engine.gguf_file import load_gguf_weights
from engine.gguf_write import write_gguf
from engine.models import load_weights, served_model_file, smollm2_path
from engine.numpy_backend import NumpyRunner


def test_smollm2_config(smollm2_weights) -> None:
    c = smollm2_weights.config
    assert (c.arch, c.n_layers, c.dim, c.ffn_dim) == ("llama", 30, 576, 1536)
    assert (c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size) == (9, 3, 64, 49152)
    assert c.rope_base == 100000.0 and c.tied_embeddings and not c.qk_norm
    assert smollm2_weights.model_id.startswith("sha256:")


def test_smollm2_tensor_layouts(smollm2_weights) -> None:
    t = smollm2_weights.tensors
    assert "output.weight" not in t  # tied
    embd = t["token_embd.weight"]
    assert (embd.ggml_type, embd.shape, embd.data.dtype, embd.data.shape) == (
        "Q8_0",
        (49152, 576),
        np.uint8,
        (49152, 576 // 32 * 34),
    )
    q = t["blk.0.attn_q.weight"]
    assert (q.ggml_type, q.shape, q.data.shape) == ("Q4_1", (576, 576), (576, 576 // 32 * 20))
    k = t["blk.0.attn_k.weight"]
    assert k.shape == (192, 576)
    down = t["blk.0.ffn_down.weight"]
    assert down.shape == (576, 1536)
    norm = t["output_norm.weight"]
    assert (norm.ggml_type, norm.shape, norm.data.dtype) == ("F32", (576,), np.float32)


@pytest.mark.parametrize(
    "name", ["tiny:f32", "tiny:f16", "tiny:q8_0", "tiny-qwen3:q4_0", "tiny:q4_1"]
)
def test_gguf_round_trip_gives_the_same_model(tmp_path: Path, name: str) -> None:
    """A dummy model written with gguf.GGUFWriter reads back tensor for tensor, and runs the same."""
    w = load_weights(name)
    back = load_gguf_weights(write_gguf(tmp_path / "m.gguf", w))
    assert back.config == w.config
    assert set(back.tensors) == set(w.tensors)
    for n, t in w.tensors.items():
        b = back.tensors[n]
        assert (b.ggml_type, b.shape) == (t.ggml_type, t.shape), n
        assert np.array_equal(np.asarray(b.data), t.data), n
    ids = np.arange(100, 140)
    assert np.array_equal(NumpyRunner(back).prefill(0, ids), NumpyRunner(w).prefill(0, ids))


def test_bf16_tensors_load(tmp_path: Path) -> None:
    w = load_weights("tiny:f32")
    bf = gguf.quants.quantize(w.tensors["blk.0.ffn_up.weight"].data, gguf.GGMLQuantizationType.BF16)
    w.tensors["blk.0.ffn_up.weight"].ggml_type = "BF16"
    w.tensors["blk.0.ffn_up.weight"].data = bf.view(np.uint16)
    back = load_gguf_weights(write_gguf(tmp_path / "bf16.gguf", w))
    t = back.tensors["blk.0.ffn_up.weight"]
    assert (t.ggml_type, t.data.dtype, t.data.shape) == ("BF16", np.uint16, (192, 64))
    ref = gguf.quants.dequantize(bf, gguf.GGMLQuantizationType.BF16)
    assert np.array_equal(t.dequantize(), ref)


def test_unknown_tensor_type_names_tensor_type_and_file(tmp_path: Path) -> None:
    w = load_weights("tiny:f32")
    q5 = gguf.quants.quantize(w.tensors["blk.1.attn_v.weight"].data, gguf.GGMLQuantizationType.Q5_0)
    w.tensors["blk.1.attn_v.weight"].ggml_type = "Q5_0"
    w.tensors["blk.1.attn_v.weight"].data = q5
    path = write_gguf(tmp_path / "q5.gguf", w)
    with pytest.raises(EngineError) as err:
        load_gguf_weights(path)
    msg = str(err.value)
    assert "blk.1.attn_v.weight" in msg and "Q5_0" in msg and str(path) in msg


def test_unknown_architecture_is_refused(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "gpt2.gguf", load_weights("tiny:f32"), arch="gpt2")
    with pytest.raises(EngineError, match=r"architecture 'gpt2' is not supported") as err:
        load_gguf_weights(path)
    assert str(path) in str(err.value)


def test_missing_tensor_is_refused(tmp_path: Path) -> None:
    w = load_weights("tiny:f32")
    del w.tensors["blk.1.ffn_gate.weight"]
    with pytest.raises(EngineError, match=r"blk\.1\.ffn_gate\.weight is missing"):
        load_gguf_weights(write_gguf(tmp_path / "m.gguf", w))


def test_damaged_files_are_refused(tmp_path: Path) -> None:
    good = write_gguf(tmp_path / "good.gguf", load_weights("tiny:q8_0")).read_bytes()
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(good[: len(good) // 2])
    with pytest.raises(EngineError, match="truncated"):
        load_gguf_weights(truncated)
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(good[:40])
    with pytest.raises(EngineError, match="truncated"):
        load_gguf_weights(header_only)
    text = tmp_path / "notes.gguf"
    text.write_text("just some text, not a model\n")
    with pytest.raises(EngineError, match="not a GGUF file"):
        load_gguf_weights(text)
    with pytest.raises(EngineError, match="not found"):
        load_gguf_weights(tmp_path / "absent.gguf")


def test_a_dummy_is_served_as_a_gguf_file_written_once(tmp_path: Path) -> None:
    """What a served engine loads for a dummy (a guard model of another shape): the dummy's
    own weights and config in a GGUF file with SmolLM2's tokenizer, written once per folder;
    a GGUF model is served from its own file."""
    folder = tmp_path / "models"
    path = served_model_file("tiny:q8_0", folder)
    assert path.parent == folder.resolve() and not list(folder.glob("*.part"))
    back, mine = load_gguf_weights(path), load_weights("tiny:q8_0", np)
    assert back.config == mine.config
    for name, t in mine.tensors.items():
        assert np.array_equal(np.asarray(back.tensors[name].data), np.asarray(t.data)), name
    tokens = gguf.GGUFReader(path).fields["tokenizer.ggml.tokens"]
    assert len(tokens.data) == mine.config.vocab_size
    written = path.stat().st_mtime_ns
    assert served_model_file("tiny:q8_0", folder) == path and path.stat().st_mtime_ns == written
    assert served_model_file("smollm2-135m", folder) == smollm2_path().resolve()
