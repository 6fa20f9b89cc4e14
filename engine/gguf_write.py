"""Writing ModelWeights to a GGUF file with the `gguf` package (gguf_file.py reads them back).

A dummy model written this way is a model another engine can load: llama.cpp's servers time
the dummies as guard models (models.served_model_file), with SmolLM2's tokenizer copied in, as
the dummies use it here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.gguf_file import open_gguf
from engine.weights import ModelWeights


def write_gguf(
    path: Path,
    weights: ModelWeights,
    arch: str | None = None,
    tokenizer_from: Path | None = None,
    **kv_overrides: float,
) -> Path:
    """Write `weights` to `path`, every tensor in its own format. `kv_overrides` replace
    metadata values by key suffix (context_length=64; `__` for a dot); `tokenizer_from` copies
    another GGUF's tokenizer.* metadata (its chat template left out)."""
    import gguf

    c = weights.config
    arch = arch or c.arch
    w = gguf.GGUFWriter(str(path), arch)
    meta = {
        "block_count": c.n_layers,
        "context_length": c.max_context,
        "embedding_length": c.dim,
        "feed_forward_length": c.ffn_dim,
        "attention.head_count": c.n_heads,
        "attention.head_count_kv": c.n_kv_heads,
        "attention.key_length": c.head_dim,
        "rope.dimension_count": c.head_dim,
    }
    meta.update(
        {k.replace("__", "."): v for k, v in kv_overrides.items() if not isinstance(v, float)}
    )
    for key, value in meta.items():
        w.add_uint32(f"{arch}.{key}", int(value))
    w.add_float32(f"{arch}.rope.freq_base", float(kv_overrides.get("rope_base", c.rope_base)))
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", float(c.norm_eps))
    w.add_uint32(f"{arch}.attention.value_length", c.head_dim)
    if tokenizer_from is not None:
        src = open_gguf(tokenizer_from).reader
        for key, field in src.fields.items():
            if not key.startswith("tokenizer.") or key == "tokenizer.chat_template":
                continue
            value = field.contents()
            vtype = field.types[0]
            if vtype == gguf.GGUFValueType.ARRAY:
                w.add_array(key, value)
            else:
                w.add_key_value(key, value, vtype)
    for t in weights.tensors.values():
        data = np.asarray(t.data)
        if t.ggml_type == "BF16":
            data = data.view(np.uint8)
        w.add_tensor(t.name, data, raw_dtype=gguf.GGMLQuantizationType[t.ggml_type])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
