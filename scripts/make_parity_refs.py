#!/usr/bin/python3
"""Writes the PyTorch reference cases that tests/nn/test_parity_masks.cpp checks cppgrad against.

One safetensors file per case in tests/data/: MultiheadAttention with every mask kind and
option, and the Transformer's encoder and decoder layers, their stacks and the whole model with
every mask and option. The files are checked in; this script is a developer tool, run again
only to add or change a case:

    apt-get install python3-torch           # Debian 12: PyTorch 1.13.1
    /usr/bin/python3 scripts/make_parity_refs.py [--out DIR] [CASE ...]

(/usr/bin/python3, because Debian installs torch for the system Python, not for a pyenv one.)
scripts/test and CI never run it, and nothing else here needs PyTorch.

Each file follows the conventions of the first three references (tests/data/README.md):
  param.<name>       the module's parameters, under their PyTorch state_dict names
  in.<name>          the inputs and masks, and in.G
  out.output         the module's output; out.weights (attention weights) when asked for;
                     out.memory (the encoder's output) for the whole Transformer
  grad.<input>       dL/d<input> for L = sum(out.output * G)
  grad.param.<name>  dL/d<parameter>
and a __metadata__ that names the module's options and how it was called, which the C++ test
reads to build the same module. Everything is float64 (masks: BOOL); dropout is 0.

The modern decoder's pieces (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention,
sliding windows, ALiBi) are not in PyTorch 1.13: their cases write each formula out in torch
ops, as the papers and Hugging Face's Llama write it, in float64 and in float32
(tests/nn/test_parity_modern.cpp).

Single ops (logsumexp, sort, topk; issue 27) are called several ways on one input each, in
float64 and float32, and the float functions (sqrt, exp, ...) of int64 and bool tensors (issue
44) (tests/nn/test_parity_ops.cpp).

BatchNorm1d over training and eval steps, einsum on 23 equations, and functional_call with a
Hessian-vector product through it (issue 29): tests/nn/test_batchnorm.cpp,
tests/autograd/test_einsum.cpp, tests/nn/test_functional_call.cpp.

Hugging Face checkpoints (issue 27): twins of transformers' GPT2LMHeadModel and LlamaForCausalLM,
written out in torch ops, save a directory each (hf_*/model.safetensors under transformers' names,
config.json, twin_logits.safetensors) for examples/gpt/test_hf_checkpoint.cpp and examples/gpt's
CLI check.
"""

import argparse
import json
import math
import os
import struct

import torch
import torch.nn as nn

# ---- the safetensors format, written by hand --------------------------------------------------
# Debian 12 has no python3-safetensors, and the format is small: an 8-byte little-endian header
# length, a JSON header naming each tensor's dtype, shape and byte range, then the raw
# little-endian bytes of every tensor back to back.

DTYPES = {torch.float64: ("F64", "<f8"), torch.float32: ("F32", "<f4"), torch.int64: ("I64", "<i8"),
          torch.bool: ("BOOL", "?")}


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, t in tensors.items():
        code, numpy_dtype = DTYPES[t.dtype]
        data = t.detach().contiguous().numpy().astype(numpy_dtype).tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # spaces pad the header so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(b"".join(blobs))


# ---- inputs and masks ---------------------------------------------------------------------------
# Every random draw comes from the global generator, seeded at the start of each case, so a
# case's numbers do not depend on which other cases run.
#
# No query may have every key masked: PyTorch gives NaN for such a row where cppgrad gives
# zeros (cppgrad's own tests cover that). So key 0 is never masked out, by any mask: the
# random bool masks and the -inf entries of the float masks leave column 0 open, padding
# masks never pad key 0, and a causal mask always shows key 0.

MASK_DENSITY = 0.4  # the share of (query, key) pairs a random mask hides


def random_hidden(shape):
    """A bool tensor, True at about MASK_DENSITY of the places, never in the last dim's column 0."""
    hidden = torch.rand(shape) < MASK_DENSITY
    hidden[..., 0] = False
    return hidden


def bool_mask(shape):
    return random_hidden(shape)


def float_mask(shape):
    """Finite values to add to the scores, with -inf at some places (a float mask can do both)."""
    values = 0.5 * torch.randn(shape, dtype=torch.float64)
    return values.masked_fill(random_hidden(shape), -math.inf)


def padding_mask(batch, length, kind):
    """(B, L) key padding: True (bool) or -inf (float) = ignore that key; the last key of the
    last sequence is always padding, so every case pads something."""
    hidden = random_hidden((batch, length))
    hidden[-1, -1] = True
    if kind == "bool":
        return hidden
    values = 0.5 * torch.randn((batch, length), dtype=torch.float64)  # a float mask is added
    return values.masked_fill(hidden, -math.inf)


def causal_mask(size):
    """torch.nn.Transformer.generate_square_subsequent_mask: -inf above the diagonal."""
    return torch.triu(torch.full((size, size), -math.inf, dtype=torch.float64), diagonal=1)


def make_mask(kind, rows, cols, batch_heads):
    """A mask of the named kind: 'bool2d' / 'float2d' (rows, cols), 'bool3d' / 'float3d'
    (batch_heads, rows, cols), 'causal' (rows, rows)."""
    if kind == "causal":
        assert rows == cols, "a causal mask needs as many keys as queries"
        return causal_mask(rows)
    shape = (rows, cols) if kind.endswith("2d") else (batch_heads, rows, cols)
    return bool_mask(shape) if kind.startswith("bool") else float_mask(shape)


def describe(mask, kind):
    if mask is None:
        return "none"
    dtype = "bool" if mask.dtype == torch.bool else "float"
    shape = "(" + ", ".join(str(n) for n in mask.shape) + ")"
    if kind == "causal":
        return f"causal: float {shape}, -inf above the diagonal"
    return f"{dtype} {shape}"


# ---- running a module ---------------------------------------------------------------------------


def perturb_parameters(module):
    """PyTorch's default init leaves biases at 0 and LayerNorm at (1, 0): N(0, 0.1^2) noise on
    every parameter makes each one matter, so a misplaced term cannot hide."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))


def seeded_module(seed, build):
    torch.manual_seed(seed)
    module = build().double()
    perturb_parameters(module)
    # train mode with dropout 0 computes what eval mode does, and keeps PyTorch off its fused
    # inference kernels (the "fast path"), so the reference is the plain composite computation.
    module.train()
    return module


def leaf(shape):
    return torch.randn(shape, dtype=torch.float64).requires_grad_()


def finish(path, module, inputs, masks, outputs, metadata):
    """Backpropagates L = sum(out.output * G), then writes the case."""
    out = outputs["output"]
    G = torch.randn(out.shape, dtype=torch.float64)
    (out * G).sum().backward()
    for name, t in outputs.items():
        assert torch.isfinite(t).all(), f"{path}: out.{name} is not finite (a fully masked row?)"

    tensors = {}
    for name, p in module.state_dict(keep_vars=True).items():
        tensors["param." + name] = p.detach()
    for name, t in list(inputs.items()) + list(masks.items()):
        tensors["in." + name] = t.detach()
    tensors["in.G"] = G
    for name, t in outputs.items():
        tensors["out." + name] = t.detach()
    for name, t in inputs.items():
        tensors["grad." + name] = t.grad
    for name, p in module.named_parameters():
        tensors["grad.param." + name] = p.grad

    common = {
        "format": "cppgrad-refs-1",
        "generator": "scripts/make_parity_refs.py",
        "torch": torch.__version__,
        "float_dtype": "F64",
        "loss": "sum(out * G); grad.X = dL/dX",
        "batch_first": "true",
        "dropout": "0.0",
        "module_mode": "train (dropout=0, so train and eval agree; PyTorch's fast path is not taken)",
        "params": "PyTorch default init (seeded) + N(0, 0.1^2) noise",
        "masks": "bool: true = masked out; float: added to the scores; key 0 is never masked",
    }
    write_safetensors(path, tensors, {**common, **metadata})
    return out


# ---- MultiheadAttention -------------------------------------------------------------------------

E, H, B, T, S = 8, 2, 2, 3, 4  # embed_dim, num_heads, batch, queries, keys


def mha_case(path, seed, *, attn_mask=None, key_padding_mask=None, need_weights=False,
             average_attn_weights=True, self_attention=False, bias=True, kdim=None, vdim=None):
    """attn_mask: None or a make_mask kind; key_padding_mask: None, 'bool' or 'float'.
    self_attention: one input is query, key and value (T = S); 'causal' needs it."""
    module = seeded_module(seed, lambda: nn.MultiheadAttention(
        E, H, dropout=0.0, bias=bias, kdim=kdim, vdim=vdim, batch_first=True))
    src_len = T if self_attention else S
    if self_attention:
        inputs = {"query": leaf((B, T, E))}
        query = key = value = inputs["query"]
    else:
        inputs = {"query": leaf((B, T, E)), "key": leaf((B, S, kdim or E)), "value": leaf((B, S, vdim or E))}
        query, key, value = inputs["query"], inputs["key"], inputs["value"]
    masks = {}
    if attn_mask:
        masks["attn_mask"] = make_mask(attn_mask, T, src_len, B * H)
    if key_padding_mask:
        masks["key_padding_mask"] = padding_mask(B, src_len, key_padding_mask)

    # PyTorch 1.13 has no is_causal argument: the causal case passes the causal attn_mask, and
    # the C++ test runs cppgrad both with that mask and with is_causal=true alone.
    output, weights = module(query, key, value, key_padding_mask=masks.get("key_padding_mask"),
                             need_weights=need_weights, attn_mask=masks.get("attn_mask"),
                             average_attn_weights=average_attn_weights)
    outputs = {"output": output}
    if need_weights:
        outputs["weights"] = weights
    metadata = {
        "kind": "MultiheadAttention",
        "case": os.path.basename(path).removesuffix(".safetensors"),
        "embed_dim": str(E), "num_heads": str(H), "bias": str(bias).lower(),
        "kdim": str(kdim or E), "vdim": str(vdim or E),
        "batch": str(B), "tgt_len": str(T), "src_len": str(src_len),
        "self_attention": str(self_attention).lower(),
        "attn_mask": describe(masks.get("attn_mask"), attn_mask),
        "key_padding_mask": describe(masks.get("key_padding_mask"), key_padding_mask),
        "is_causal": str(attn_mask == "causal").lower(),
        "need_weights": str(need_weights).lower(),
        "average_attn_weights": str(average_attn_weights).lower(),
    }
    if need_weights:
        metadata["weights_shape"] = "(B, T, S) averaged over heads" if average_attn_weights else "(B, H, T, S)"
    finish(path, module, inputs, masks, outputs, metadata)


# ---- the Transformer family ---------------------------------------------------------------------

D, NHEAD, FF = 8, 2, 16  # d_model, nhead, dim_feedforward; batch B, target length T, source S


def layer_options(activation, norm_first, layer_norm_eps):
    return dict(d_model=D, nhead=NHEAD, dim_feedforward=FF, dropout=0.0, activation=activation,
                layer_norm_eps=layer_norm_eps, batch_first=True, norm_first=norm_first)


def transformer_case(path, seed, kind, *, activation="relu", norm_first=False, layer_norm_eps=1e-5,
                     num_layers=1, final_norm=False, num_encoder_layers=1, num_decoder_layers=1,
                     src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=False,
                     tgt_key_padding_mask=False, memory_key_padding_mask=False):
    """kind: TransformerEncoderLayer, TransformerDecoderLayer, TransformerEncoder,
    TransformerDecoder (num_layers, final_norm) or Transformer (always with final norms).
    Masks: None or a make_mask kind; key padding masks: bool, or none."""
    options = layer_options(activation, norm_first, layer_norm_eps)

    def build():
        if kind == "TransformerEncoderLayer":
            return nn.TransformerEncoderLayer(**options)
        if kind == "TransformerDecoderLayer":
            return nn.TransformerDecoderLayer(**options)
        norm = nn.LayerNorm(D, eps=layer_norm_eps) if final_norm else None
        if kind == "TransformerEncoder":
            return nn.TransformerEncoder(nn.TransformerEncoderLayer(**options), num_layers, norm=norm)
        if kind == "TransformerDecoder":
            return nn.TransformerDecoder(nn.TransformerDecoderLayer(**options), num_layers, norm=norm)
        return nn.Transformer(num_encoder_layers=num_encoder_layers, num_decoder_layers=num_decoder_layers,
                              **options)

    module = seeded_module(seed, build)
    encodes = kind in ("TransformerEncoderLayer", "TransformerEncoder", "Transformer")
    decodes = kind in ("TransformerDecoderLayer", "TransformerDecoder", "Transformer")
    inputs, masks = {}, {}
    if encodes:
        inputs["src"] = leaf((B, S, D))
    if decodes:
        inputs["tgt"] = leaf((B, T, D))
        if kind != "Transformer":
            inputs["memory"] = leaf((B, S, D))  # the Transformer makes its own
    if src_mask:
        masks["src_mask"] = make_mask(src_mask, S, S, B * NHEAD)
    if tgt_mask:
        masks["tgt_mask"] = make_mask(tgt_mask, T, T, B * NHEAD)
    if memory_mask:
        masks["memory_mask"] = make_mask(memory_mask, T, S, B * NHEAD)
    if src_key_padding_mask:
        masks["src_key_padding_mask"] = padding_mask(B, S, "bool")
    if tgt_key_padding_mask:
        masks["tgt_key_padding_mask"] = padding_mask(B, T, "bool")
    if memory_key_padding_mask:
        # the padding of the sequences the memory was made from, as a Transformer would use it
        if "src_key_padding_mask" in masks:
            masks["memory_key_padding_mask"] = masks["src_key_padding_mask"]
        else:
            masks["memory_key_padding_mask"] = padding_mask(B, S, "bool")
    m = masks.get

    outputs = {}
    if kind == "TransformerEncoderLayer":
        outputs["output"] = module(inputs["src"], src_mask=m("src_mask"), src_key_padding_mask=m("src_key_padding_mask"))
    elif kind == "TransformerEncoder":
        outputs["output"] = module(inputs["src"], mask=m("src_mask"), src_key_padding_mask=m("src_key_padding_mask"))
    elif kind in ("TransformerDecoderLayer", "TransformerDecoder"):
        outputs["output"] = module(inputs["tgt"], inputs["memory"], tgt_mask=m("tgt_mask"), memory_mask=m("memory_mask"),
                                   tgt_key_padding_mask=m("tgt_key_padding_mask"),
                                   memory_key_padding_mask=m("memory_key_padding_mask"))
    else:
        outputs["output"] = module(inputs["src"], inputs["tgt"], src_mask=m("src_mask"), tgt_mask=m("tgt_mask"),
                                   memory_mask=m("memory_mask"), src_key_padding_mask=m("src_key_padding_mask"),
                                   tgt_key_padding_mask=m("tgt_key_padding_mask"),
                                   memory_key_padding_mask=m("memory_key_padding_mask"))
        with torch.no_grad():  # the encoder's output alone, to compare apart; not part of the loss
            outputs["memory"] = module.encoder(inputs["src"], mask=m("src_mask"),
                                               src_key_padding_mask=m("src_key_padding_mask"))

    metadata = {
        "kind": kind,
        "case": os.path.basename(path).removesuffix(".safetensors"),
        "d_model": str(D), "nhead": str(NHEAD), "dim_feedforward": str(FF),
        "activation": activation, "norm_first": str(norm_first).lower(), "layer_norm_eps": repr(layer_norm_eps),
        "batch": str(B), "src_len": str(S), "tgt_len": str(T),
        # PyTorch 1.13 has no tgt_is_causal: the causal tgt_mask stands for it, and the C++ test
        # runs cppgrad with that mask and with tgt_is_causal=true alone.
        "tgt_is_causal": str(tgt_mask == "causal").lower(),
    }
    if kind in ("TransformerEncoder", "TransformerDecoder"):
        metadata.update(num_layers=str(num_layers), final_norm=str(final_norm).lower())
    if kind == "Transformer":
        metadata.update(num_encoder_layers=str(num_encoder_layers), num_decoder_layers=str(num_decoder_layers),
                        final_norm="true")
    for name, kind_of_mask in (("src_mask", src_mask), ("tgt_mask", tgt_mask), ("memory_mask", memory_mask),
                               ("src_key_padding_mask", None), ("tgt_key_padding_mask", None),
                               ("memory_key_padding_mask", None)):
        metadata[name] = describe(masks.get(name), kind_of_mask)
    finish(path, module, inputs, masks, outputs, metadata)


# ---- the modern decoder's pieces --------------------------------------------------------------
# None is a torch 1.13 module (torch.nn.RMSNorm came with 2.4, enable_gqa with 2.5), so each is
# its formula in torch ops; autograd gives the gradients. Same file conventions as above, plus
# metadata "float_dtype" F64 or F32 (masks stay BOOL or the float dtype).

TORCH_DTYPES = {"F64": torch.float64, "F32": torch.float32}


def modern_finish(path, params, inputs, masks, output, metadata, dtype_code):
    """Backpropagates L = sum(output * G) into the leaves `params` and `inputs`, writes the case."""
    G = torch.randn(output.shape, dtype=output.dtype)
    (output * G).sum().backward()
    assert torch.isfinite(output).all(), f"{path}: output is not finite"
    tensors = {}
    for name, p in params.items():
        tensors["param." + name] = p.detach()
    for name, t in list(inputs.items()) + list(masks.items()):
        tensors["in." + name] = t.detach()
    tensors["in.G"] = G
    tensors["out.output"] = output.detach()
    for name, t in inputs.items():
        tensors["grad." + name] = t.grad
    for name, p in params.items():
        tensors["grad.param." + name] = p.grad
    common = {
        "format": "cppgrad-refs-1",
        "generator": "scripts/make_parity_refs.py",
        "torch": torch.__version__,
        "float_dtype": dtype_code,
        "loss": "sum(out * G); grad.X = dL/dX",
        "case": os.path.basename(path).removesuffix(".safetensors"),
        "masks": "bool: true = masked out; float: added to the scores; key 0 is never masked",
    }
    write_safetensors(path, tensors, {**common, **metadata})


def modern_leaf(shape, dtype):
    return torch.randn(shape, dtype=torch.float64).to(dtype).requires_grad_()


def rms_norm_case(path, seed, *, dtype="F64", eps=None, affine=True):
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dim; eps None: finfo(dtype).eps."""
    torch.manual_seed(seed)
    t = TORCH_DTYPES[dtype]
    x = modern_leaf((2, 3, 8), t)
    params = {"weight": (1 + 0.1 * torch.randn(8, dtype=torch.float64)).to(t).requires_grad_()} if affine else {}
    epsilon = torch.finfo(t).eps if eps is None else eps
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon)
    if affine:
        y = y * params["weight"]
    modern_finish(path, params, {"x": x}, {}, y, {
        "kind": "RMSNorm", "normalized_shape": "(8)", "eps": "none" if eps is None else repr(eps),
        "elementwise_affine": str(affine).lower()}, dtype)


def rotary_angles(length, dim, offset, base):
    """m * theta_i for m = offset .. offset + length - 1, theta_i = base^(-2i/dim): (length, dim/2), float64."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    return torch.outer(torch.arange(offset, offset + length, dtype=torch.float64), inv_freq)


def rotate(x, offset, base, layout):
    """Rotary embeddings on x (..., T, d). halves: Hugging Face's Llama (rotate_half); interleaved:
    Meta's Llama (pairs of adjacent features as complex numbers)."""
    T, d = x.shape[-2], x.shape[-1]
    angles = rotary_angles(T, d, offset, base)
    if layout == "halves":
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin
    freqs_cis = torch.polar(torch.ones_like(angles), angles).to(
        torch.complex128 if x.dtype == torch.float64 else torch.complex64)
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(xc * freqs_cis).flatten(-2)


def rotary_case(path, seed, *, dtype="F64", layout="interleaved", offset=3, base=10000.0):
    torch.manual_seed(seed)
    x = modern_leaf((2, 2, 5, 8), TORCH_DTYPES[dtype])
    modern_finish(path, {}, {"x": x}, {}, rotate(x, offset, base, layout), {
        "kind": "RotaryEmbedding", "dim": "8", "layout": layout, "position_offset": str(offset), "base": repr(base),
        "angles": "computed in float64, cos and sin rounded to the case's dtype"}, dtype)


def swiglu_case(path, seed, *, dtype="F64", bias=False):
    """w2(silu(w1(x)) * w3(x)), Meta's Llama FeedForward names (HF: gate_proj = w1, up_proj = w3,
    down_proj = w2)."""
    torch.manual_seed(seed)
    t = TORCH_DTYPES[dtype]
    D, HID = 8, 12
    x = modern_leaf((2, 3, D), t)
    params = {}
    for name, (out_f, in_f) in (("w1", (HID, D)), ("w2", (D, HID)), ("w3", (HID, D))):
        params[name + ".weight"] = ((torch.rand(out_f, in_f, dtype=torch.float64) * 2 - 1) / math.sqrt(in_f)).to(t)
        if bias:
            params[name + ".bias"] = (0.1 * torch.randn(out_f, dtype=torch.float64)).to(t)
    for p in params.values():
        p.requires_grad_()

    def lin(name, v):
        return torch.nn.functional.linear(v, params[name + ".weight"], params.get(name + ".bias"))

    y = lin("w2", torch.nn.functional.silu(lin("w1", x)) * lin("w3", x))
    modern_finish(path, params, {"x": x}, {}, y, {
        "kind": "SwiGLU", "dim": str(D), "hidden_dim": str(HID), "bias": str(bias).lower()}, dtype)


def attention_formula(q, k, v, *, mask=None, causal=False, window=None, slopes=None):
    """softmax(q k^T / sqrt(d) + mask) v with k and v's heads repeated (repeat_interleave) to q's:
    PyTorch 2.5's enable_gqa, written for 1.13. window: |i - j| >= window hidden; slopes: ALiBi's
    -slope_h * |i - j| added to head h."""
    r = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(r, dim=-3), v.repeat_interleave(r, dim=-3)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    T, S = scores.shape[-2], scores.shape[-1]
    distance = (torch.arange(T)[:, None] - torch.arange(S)[None, :]).to(torch.float64)
    if slopes is not None:
        scores = scores - (slopes[:, None, None] * distance.abs()).to(scores.dtype)
    if mask is not None:
        scores = scores.masked_fill(mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    if causal:
        scores = scores.masked_fill(distance < 0, -math.inf)
    if window is not None:
        scores = scores.masked_fill(distance.abs() >= window, -math.inf)
    return torch.softmax(scores, dim=-1) @ v


def alibi_slopes(h):
    """The paper's slopes: 2^(-8i/n) for a power of 2 n, else those of the power below and every
    other one of twice it."""
    def geometric(n):
        return [2 ** (-8 * i / n) for i in range(1, n + 1)]
    power = 2 ** math.floor(math.log2(h))
    return torch.tensor(geometric(power) + geometric(2 * power)[0::2][: h - power], dtype=torch.float64)


def gqa_case(path, seed, *, dtype="F64", heads=4, kv_heads=2, tgt=4, src=6, mask=None, causal=False,
             window=None, alibi=False):
    """mask: None, 'bool2d' (T, S), 'float4d' (B, H, T, S) or 'padding' (B, 1, 1, S) bool."""
    torch.manual_seed(seed)
    t = TORCH_DTYPES[dtype]
    Bn, d = 2, 4
    inputs = {"q": modern_leaf((Bn, heads, tgt, d), t), "k": modern_leaf((Bn, kv_heads, src, d), t),
              "v": modern_leaf((Bn, kv_heads, src, 3), t)}
    masks = {}
    if mask == "bool2d":
        masks["attn_mask"] = random_hidden((tgt, src))
    elif mask == "float4d":
        masks["attn_mask"] = float_mask((Bn, heads, tgt, src)).to(t)
    elif mask == "padding":
        masks["attn_mask"] = padding_mask(Bn, src, "bool").reshape(Bn, 1, 1, src)
    slopes = alibi_slopes(heads) if alibi else None
    out = attention_formula(inputs["q"], inputs["k"], inputs["v"], mask=masks.get("attn_mask"), causal=causal,
                            window=window, slopes=slopes)
    modern_finish(path, {}, inputs, masks, out, {
        "kind": "scaled_dot_product_attention", "num_heads": str(heads), "num_kv_heads": str(kv_heads),
        "attn_mask": describe(masks.get("attn_mask"), mask), "is_causal": str(causal).lower(),
        "window": "none" if window is None else str(window), "alibi": str(alibi).lower(),
        "reference": "k and v repeat_interleave'd to q's heads, softmax(q k^T / sqrt(d) + mask) v"}, dtype)


def mha_gqa_case(path, seed, *, dtype="F64", heads=4, kv_heads=2, self_attention=False, causal=False,
                 key_padding=False, rotary=None):
    """MultiheadAttention with num_kv_heads, written out: separate projections under cppgrad's
    names (q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias = [b_q, b_k, b_v], out_proj),
    rotary: None or a layout, applied to each head's queries and keys from position 0."""
    torch.manual_seed(seed)
    t = TORCH_DTYPES[dtype]
    Ed, Bn, Tq, Sk = 8, 2, 3, 4
    d = Ed // heads
    kv = kv_heads * d
    if self_attention:
        Sk = Tq
    shapes = {"q_proj_weight": (Ed, Ed), "k_proj_weight": (kv, Ed), "v_proj_weight": (kv, Ed),
              "in_proj_bias": (Ed + 2 * kv,), "out_proj.weight": (Ed, Ed), "out_proj.bias": (Ed,)}
    params = {n: ((torch.rand(shape, dtype=torch.float64) * 2 - 1) / math.sqrt(Ed)).to(t).requires_grad_()
              for n, shape in shapes.items()}
    inputs = {"query": modern_leaf((Bn, Tq, Ed), t)}
    if self_attention:
        key = value = inputs["query"]
    else:
        inputs["key"], inputs["value"] = modern_leaf((Bn, Sk, Ed), t), modern_leaf((Bn, Sk, Ed), t)
        key, value = inputs["key"], inputs["value"]
    masks = {}
    if key_padding:
        masks["key_padding_mask"] = padding_mask(Bn, Sk, "bool")
    b = params["in_proj_bias"]
    q = torch.nn.functional.linear(inputs["query"], params["q_proj_weight"], b[:Ed])
    k = torch.nn.functional.linear(key, params["k_proj_weight"], b[Ed:Ed + kv])
    v = torch.nn.functional.linear(value, params["v_proj_weight"], b[Ed + kv:])

    def heads_of(x, n):  # (B, L, n*d) -> (B, n, L, d)
        return x.reshape(x.shape[0], x.shape[1], n, d).transpose(1, 2)

    q, k, v = heads_of(q, heads), heads_of(k, kv_heads), heads_of(v, kv_heads)
    if rotary:
        q, k = rotate(q, 0, 10000.0, rotary), rotate(k, 0, 10000.0, rotary)
    mask = masks["key_padding_mask"][:, None, None, :] if key_padding else None
    out = attention_formula(q, k, v, mask=mask, causal=causal)  # (B, H, T, d)
    out = torch.nn.functional.linear(out.transpose(1, 2).reshape(Bn, Tq, Ed), params["out_proj.weight"],
                                     params["out_proj.bias"])
    modern_finish(path, params, inputs, masks, out, {
        "kind": "MultiheadAttention", "embed_dim": str(Ed), "num_heads": str(heads), "num_kv_heads": str(kv_heads),
        "self_attention": str(self_attention).lower(), "is_causal": str(causal).lower(),
        "key_padding_mask": describe(masks.get("key_padding_mask"), None), "rotary": rotary or "none",
        "batch": str(Bn), "tgt_len": str(Tq), "src_len": str(Sk)}, dtype)


def llama_attention_case(path, seed, *, d=16, heads=8, kv_heads=2, head_dim=4, T=5):
    """transformers' LlamaAttention (rotate_half rotary from position 0, repeat_kv, causal) with a
    head_dim other than d // heads, under cppgrad's MultiheadAttention names (bias=False):
    q_proj_weight (heads*head_dim, d), k_proj_weight and v_proj_weight (kv_heads*head_dim, d),
    out_proj.weight (d, heads*head_dim)."""
    torch.manual_seed(seed)
    config = {"hidden_size": d, "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
              "rope_theta": 10000.0}
    attention = LlamaAttention(config).to(torch.float64)
    with torch.no_grad():
        for p in attention.parameters():
            p.copy_((torch.rand(p.shape, dtype=torch.float64) * 2 - 1) / math.sqrt(p.shape[1]))
    x = modern_leaf((2, T, d), torch.float64)
    out = attention(x)
    params = {"q_proj_weight": attention.q_proj.weight, "k_proj_weight": attention.k_proj.weight,
              "v_proj_weight": attention.v_proj.weight, "out_proj.weight": attention.o_proj.weight}
    modern_finish(path, params, {"x": x}, {}, out, {
        "kind": "LlamaAttention", "embed_dim": str(d), "num_heads": str(heads), "num_kv_heads": str(kv_heads),
        "head_dim": str(head_dim), "rotary": "halves", "rope_theta": "10000.0", "is_causal": "true",
        "reference": "transformers' LlamaAttention in torch ops: q_proj, k_proj, v_proj to head_dim-wide heads, "
                     "rotate_half, repeat_kv, softmax(q k^T / sqrt(head_dim) + causal) v, o_proj"}, "F64")


MODERN_CASES = {
    "rmsnorm_f64": (rms_norm_case, 301, dict(eps=1e-6)),
    "rmsnorm_eps_none_f64": (rms_norm_case, 302, dict()),
    "rmsnorm_f32": (rms_norm_case, 303, dict(dtype="F32")),
    "rmsnorm_noaffine_f32": (rms_norm_case, 304, dict(dtype="F32", eps=1e-5, affine=False)),
    "rope_interleaved_f64": (rotary_case, 311, dict(layout="interleaved")),
    "rope_halves_f64": (rotary_case, 312, dict(layout="halves", base=500.0)),
    "rope_interleaved_f32": (rotary_case, 313, dict(dtype="F32", layout="interleaved", offset=0)),
    "rope_halves_f32": (rotary_case, 314, dict(dtype="F32", layout="halves", offset=7)),
    "swiglu_f64": (swiglu_case, 321, dict()),
    "swiglu_bias_f64": (swiglu_case, 322, dict(bias=True)),
    "swiglu_f32": (swiglu_case, 323, dict(dtype="F32")),
    "gqa_h4g4_bool_f64": (gqa_case, 331, dict(kv_heads=4, mask="bool2d")),
    "gqa_h4g2_float4d_f64": (gqa_case, 332, dict(kv_heads=2, mask="float4d")),
    "gqa_h4g1_causal_padding_f64": (gqa_case, 333, dict(kv_heads=1, tgt=6, mask="padding", causal=True)),
    "gqa_h8g2_causal_f32": (gqa_case, 334, dict(dtype="F32", heads=8, kv_heads=2, tgt=6, causal=True)),
    "gqa_h4g1_padding_f32": (gqa_case, 335, dict(dtype="F32", kv_heads=1, mask="padding")),
    "gqa_h6g2_window_alibi_f64": (gqa_case, 336, dict(heads=6, kv_heads=2, tgt=6, causal=True, window=3, alibi=True)),
    "mha_gqa_h4g2_kpm_f64": (mha_gqa_case, 341, dict(kv_heads=2, key_padding=True)),
    "mha_mqa_causal_rope_f64": (mha_gqa_case, 342, dict(kv_heads=1, self_attention=True, causal=True,
                                                         rotary="halves")),
    "mha_gqa_rope_interleaved_kpm_f32": (mha_gqa_case, 343, dict(dtype="F32", kv_heads=2, self_attention=True,
                                                                  causal=True, key_padding=True,
                                                                  rotary="interleaved")),
    "llama_attention_head_dim_f64": (llama_attention_case, 344, dict(d=16, heads=8, kv_heads=2, head_dim=4)),
}


# ---- single ops: logsumexp, sort, topk (issue 27) ------------------------------------------------
# Each case calls one op several ways on the same input x and writes, for call <c>, out.<c> (and
# out.<c>.indices for sort and topk), in.G.<c>, and grad.x = dL/dx for L = sum over the calls of
# sum(out.<c> * in.G.<c>). tests/nn/test_parity_ops.cpp makes the same calls. Inputs have no
# ties where PyTorch leaves the order of ties open (topk); sort is called with stable=True, whose
# order of ties is defined (input order, in both directions).


def ops_finish(path, x, calls, metadata, dtype_code, extra_inputs=None):
    """calls: name -> (description, function of x giving a tensor or a (values, indices) pair)."""
    tensors, loss = {"in.x": x.detach()}, 0
    for name, t in (extra_inputs or {}).items():
        tensors["in." + name] = t
    for name, (description, f) in calls.items():
        result = f(x)
        values, indices = (result, None) if isinstance(result, torch.Tensor) else result
        tensors["out." + name] = values.detach()
        if indices is not None:
            tensors["out." + name + ".indices"] = indices
        if values.requires_grad:
            G = torch.randn(values.shape, dtype=values.dtype)
            tensors["in.G." + name] = G
            loss = loss + (values * G).sum()
        metadata["call." + name] = description
    if x.requires_grad:
        loss.backward()
        tensors["grad.x"] = x.grad
    common = {"format": "cppgrad-refs-1", "generator": "scripts/make_parity_refs.py", "torch": torch.__version__,
              "float_dtype": dtype_code, "loss": "sum over calls c of sum(out.c * in.G.c); grad.x = dL/dx",
              "case": os.path.basename(path).removesuffix(".safetensors")}
    write_safetensors(path, tensors, {**common, **metadata})


def logsumexp_case(path, seed, *, dtype="F64"):
    """logsumexp over one dim, two dims with keepdim, every dim; rows shifted by +-800 (exp overflows)."""
    torch.manual_seed(seed)
    t = TORCH_DTYPES[dtype]
    x = torch.randn(3, 4, 5, dtype=torch.float64) * 3
    x[1] += 800.0   # exp(800) overflows float64: only the max-shifted sum stays finite
    x[2, 0] -= 800.0
    x = x.to(t).requires_grad_()
    ops_finish(path, x, {
        "dim1": ("torch.logsumexp(x, 1)", lambda x: torch.logsumexp(x, 1)),
        "dims02_keepdim": ("torch.logsumexp(x, (0, 2), keepdim=True)", lambda x: torch.logsumexp(x, (0, 2), True)),
        "last": ("torch.logsumexp(x, -1)", lambda x: torch.logsumexp(x, -1)),
        "all": ("torch.logsumexp(x, (0, 1, 2))", lambda x: torch.logsumexp(x, (0, 1, 2))),
    }, {"op": "logsumexp"}, dtype)


def sort_case(path, seed, *, dtype="F64"):
    """sort along each dim, both directions, stable; x has ties, +-inf and a NaN; an int64 input too."""
    torch.manual_seed(seed)
    t = TORCH_DTYPES[dtype]
    x = torch.randint(-3, 4, (3, 4, 6)).to(torch.float64) / 2  # many ties
    x[0, 1, 2], x[1, 2, 3], x[2, 3, 0] = float("inf"), float("-inf"), float("nan")
    x = x.to(t).requires_grad_()
    ints = torch.randint(0, 4, (4, 7))
    calls = {
        "last": ("torch.sort(x, -1, stable=True)", lambda x: torch.sort(x, stable=True, dim=-1)),
        "dim1_descending": ("torch.sort(x, 1, descending=True, stable=True)",
                            lambda x: torch.sort(x, stable=True, dim=1, descending=True)),
        "dim0": ("torch.sort(x, 0, stable=True)", lambda x: torch.sort(x, stable=True, dim=0)),
        "ints_descending": ("torch.sort(in.ints, 1, descending=True, stable=True)",
                            lambda x: torch.sort(ints, stable=True, dim=1, descending=True)),
    }
    ops_finish(path, x, calls, {"op": "sort"}, dtype, {"ints": ints})


def topk_case(path, seed, *, dtype="F64"):
    """topk along each dim, largest and smallest; x's values are distinct (PyTorch leaves ties' order open)."""
    torch.manual_seed(seed)
    t = TORCH_DTYPES[dtype]
    x = torch.randperm(72).to(torch.float64).reshape(3, 4, 6) / 4 - 9
    x[0, 0, 0], x[1, 1, 1], x[2, 2, 2] = float("inf"), float("-inf"), float("nan")
    x = x.to(t).requires_grad_()
    ops_finish(path, x, {
        "last_k3": ("torch.topk(x, 3)", lambda x: torch.topk(x, 3)),
        "dim1_k2_smallest": ("torch.topk(x, 2, 1, largest=False)", lambda x: torch.topk(x, 2, 1, largest=False)),
        "dim0_k3": ("torch.topk(x, 3, 0)", lambda x: torch.topk(x, 3, 0)),
        "last_k0": ("torch.topk(x, 0)", lambda x: torch.topk(x, 0)),
    }, {"op": "topk"}, dtype)


FLOAT_FUNCTIONS = ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "sin", "cos"]


def float_functions_of_ints_case(path, seed):
    """The float functions of an int64 and a bool tensor: PyTorch computes them in its default
    dtype, float32 (torch.sqrt(torch.tensor([4])) is tensor([2.])). x holds 0 and negatives too
    (log: -inf and NaN; rsqrt: inf)."""
    torch.manual_seed(seed)
    x = torch.cat([torch.tensor([0, -1, 1, 4, 9, -7]), torch.randint(-50, 50, (6,))]).reshape(2, 6)
    flags = torch.tensor([[True, False, True], [False, False, True]])
    calls = {}
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)  # PyTorch's own default: this script's is float64
    for op in FLOAT_FUNCTIONS:
        calls[op] = (f"torch.{op}(x)", lambda x, op=op: getattr(torch, op)(x))
        calls[op + ".bool"] = (f"torch.{op}(in.flags)", lambda x, op=op: getattr(torch, op)(flags))
    try:
        ops_finish(path, x, calls, {"op": "float functions of integers"}, "F32", {"flags": flags})
    finally:
        torch.set_default_dtype(default)


OPS_CASES = {
    "ops_float_functions_of_ints": (float_functions_of_ints_case, 406, dict()),
    "ops_logsumexp_f64": (logsumexp_case, 401, dict()),
    "ops_logsumexp_f32": (logsumexp_case, 402, dict(dtype="F32")),
    "ops_sort_f64": (sort_case, 403, dict()),
    "ops_sort_f32": (sort_case, 404, dict(dtype="F32")),
    "ops_topk_f64": (topk_case, 405, dict()),
}


# ---- BatchNorm1d (issue 29) -----------------------------------------------------------------------
# nn.BatchNorm1d run for a few training steps, then once in eval mode, each on its own input:
#   param.<name>       the state_dict before the first step (PyTorch's names: weight, bias,
#                      running_mean, running_var, num_batches_tracked), parameters perturbed
#   in.x<i>, in.G<i>   step i's input and output weight (the last step is the eval one)
#   out.y<i>           step i's output
#   state.<name>       every buffer after the last training step
#   grad.x<i>, grad.param.<name>  the gradients of L = sum over the steps of sum(out.y<i> * in.G<i>)
# (tests/nn/test_batchnorm.cpp).


def batchnorm_case(path, seed, *, shape, momentum=0.1, affine=True, track_running_stats=True, eps=1e-5,
                   train_steps=3):
    torch.manual_seed(seed)
    module = nn.BatchNorm1d(shape[1], eps=eps, momentum=momentum, affine=affine,
                            track_running_stats=track_running_stats).double()
    perturb_parameters(module)
    tensors = {"param." + name: t.detach().clone() for name, t in module.state_dict().items()}
    loss = 0
    inputs = []
    for step in range(train_steps + 1):
        module.train(step < train_steps)
        x = (1.5 * torch.randn(shape, dtype=torch.float64) + 0.5 * step).requires_grad_()
        y = module(x)
        G = torch.randn(y.shape, dtype=torch.float64)
        loss = loss + (y * G).sum()
        inputs.append(x)
        tensors[f"in.x{step}"], tensors[f"in.G{step}"], tensors[f"out.y{step}"] = x.detach(), G, y.detach()
        if step == train_steps - 1:
            for name, t in module.named_buffers():
                tensors["state." + name] = t.detach().clone()
    loss.backward()
    for step, x in enumerate(inputs):
        tensors[f"grad.x{step}"] = x.grad
    for name, p in module.named_parameters():
        tensors["grad.param." + name] = p.grad
    metadata = {"format": "cppgrad-refs-1", "generator": "scripts/make_parity_refs.py", "torch": torch.__version__,
                "float_dtype": "F64", "case": os.path.basename(path).removesuffix(".safetensors"),
                "module": "BatchNorm1d", "num_features": str(shape[1]), "eps": repr(eps),
                "momentum": "None" if momentum is None else repr(momentum), "affine": str(affine).lower(),
                "track_running_stats": str(track_running_stats).lower(), "train_steps": str(train_steps),
                "steps": f"{train_steps} in train mode, then 1 in eval mode",
                "loss": "sum over steps i of sum(out.y<i> * in.G<i>); grad.X = dL/dX"}
    write_safetensors(path, tensors, metadata)




# ---- einsum (issue 29) ---------------------------------------------------------------------------
# torch.einsum called on several equations, each on its own float64 operands: for call <c>,
# in.<c>.<i> (operand i), out.<c>, in.G.<c> and grad.<c>.<i> = dL/d(operand i) for
# L = sum over the calls of sum(out.<c> * in.G.<c>); metadata call.<c> is the equation and
# "calls" lists them in order (tests/autograd/test_einsum.cpp).

EINSUM_CALLS = {
    "matmul": ("ij,jk->ik", [(3, 4), (4, 5)]),
    "attention_scores": ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    "attention_values": ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)]),
    "implicit": ("ij,jk", [(3, 4), (4, 5)]),
    "implicit_sorted": ("ba,ca", [(3, 4), (5, 4)]),
    "implicit_capitals_first": ("zA,zb", [(3, 4), (3, 5)]),
    "trace": ("ii", [(4, 4)]),
    "diagonal": ("ii->i", [(4, 4)]),
    "batch_diagonal": ("bii->bi", [(2, 3, 3)]),
    "diagonal_then_contract": ("iij,jk->ik", [(3, 3, 4), (4, 2)]),
    "outer": ("i,j->ij", [(3,), (4,)]),
    "dot": ("i,i->", [(5,), (5,)]),
    "sum_all": ("ijk->", [(2, 3, 4)]),
    "transpose": ("ij->ji", [(3, 5)]),
    "hadamard": ("ij,ij->ij", [(3, 4), (3, 4)]),
    "ellipsis_broadcast_matmul": ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 2)]),
    "ellipsis_implicit": ("...ij,jk", [(2, 3, 4), (4, 5)]),
    "ellipsis_summed": ("...ij,jk->ik", [(2, 3, 4), (4, 5)]),
    "ellipsis_middle": ("b...d,bd->b...", [(2, 3, 4, 5), (2, 5)]),
    "three_operands": ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    "bilinear": ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    "size_one_broadcast": ("ij,kj->ik", [(2, 1), (4, 3)]),
    "spaces": (" i j , j k -> k i ", [(3, 4), (4, 2)]),
}


def einsum_case(path, seed):
    torch.manual_seed(seed)
    tensors, loss, operands = {}, 0, {}
    for name, (equation, shapes) in EINSUM_CALLS.items():
        ops = [torch.randn(shape, dtype=torch.float64).requires_grad_() for shape in shapes]
        out = torch.einsum(equation, *ops)
        G = torch.randn(out.shape, dtype=torch.float64)
        loss = loss + (out * G).sum()
        operands[name] = ops
        for i, op in enumerate(ops):
            tensors[f"in.{name}.{i}"] = op.detach()
        tensors[f"out.{name}"], tensors[f"in.G.{name}"] = out.detach(), G
    loss.backward()
    for name, ops in operands.items():
        for i, op in enumerate(ops):
            tensors[f"grad.{name}.{i}"] = op.grad
    metadata = {"format": "cppgrad-refs-1", "generator": "scripts/make_parity_refs.py", "torch": torch.__version__,
                "float_dtype": "F64", "case": os.path.basename(path).removesuffix(".safetensors"), "op": "einsum",
                "calls": ",".join(EINSUM_CALLS),
                "loss": "sum over calls c of sum(out.c * in.G.c); grad.c.i = dL/d(in.c.i)"}
    for name, (equation, shapes) in EINSUM_CALLS.items():
        metadata["call." + name] = equation
    write_safetensors(path, tensors, metadata)


# ---- functional_call and a Hessian-vector product (issue 29) ---------------------------------------
# A small model (Linear, BatchNorm1d in training, Tanh, Linear) called through
# torch.nn.utils.stateless.functional_call (torch.func.functional_call since 2.0) with parameters
# and buffers other than its own; L = mse_loss(output, target), its gradient with respect to the
# parameters given (create_graph) and the Hessian-vector product H·v:
#   param.<name>   the module's own state_dict (the call must not use it, nor change it)
#   in.p.<name>    the parameters and buffers given; in.x, in.target; in.v.<name> per parameter
#   out.output, out.loss, out.grad.<name> = dL/dp, out.hvp.<name> = (H v) for that parameter
#   state.<name>   the buffers given, after the call (BatchNorm updated them in place)
# (tests/nn/test_functional_call.cpp).


def functional_call_case(path, seed):
    from torch.nn.utils import stateless
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 2)).double()
    model.train()
    tensors = {"param." + name: t.detach().clone() for name, t in model.state_dict().items()}
    given = {}
    for name, p in model.named_parameters():
        given[name] = (p.detach() + 0.3 * torch.randn_like(p)).requires_grad_()
    given["1.running_mean"] = 0.2 * torch.randn(4, dtype=torch.float64)
    given["1.running_var"] = 0.5 + torch.rand(4, dtype=torch.float64)
    given["1.num_batches_tracked"] = torch.tensor(5)
    for name, t in given.items():
        tensors["in.p." + name] = t.detach().clone()
    x, target = torch.randn(6, 3, dtype=torch.float64), torch.randn(6, 2, dtype=torch.float64)
    output = stateless.functional_call(model, given, (x,))
    loss = nn.functional.mse_loss(output, target)
    names = [name for name, _ in model.named_parameters()]
    v = {name: torch.randn_like(given[name]) for name in names}
    grads = torch.autograd.grad(loss, [given[n] for n in names], create_graph=True)
    hvp = torch.autograd.grad(sum((g * v[n]).sum() for g, n in zip(grads, names)), [given[n] for n in names])
    tensors.update({"in.x": x, "in.target": target, "out.output": output.detach(), "out.loss": loss.detach()})
    for n, g, h in zip(names, grads, hvp):
        tensors["in.v." + n], tensors["out.grad." + n], tensors["out.hvp." + n] = v[n], g.detach(), h
    for name in ("1.running_mean", "1.running_var", "1.num_batches_tracked"):
        tensors["state." + name] = given[name].detach().clone()
    for name, t in model.state_dict().items():  # the model's own state is left as it was
        assert torch.equal(t, tensors["param." + name]), name
    metadata = {"format": "cppgrad-refs-1", "generator": "scripts/make_parity_refs.py", "torch": torch.__version__,
                "float_dtype": "F64", "case": os.path.basename(path).removesuffix(".safetensors"),
                "model": "Sequential(Linear(3, 4), BatchNorm1d(4), Tanh(), Linear(4, 2)), train mode",
                "loss": "mse_loss(out.output, in.target); out.hvp.<p> = sum over q of d2L/dp dq . in.v.<q>"}
    write_safetensors(path, tensors, metadata)


ISSUE29_CASES = {
    "batchnorm1d_nc": (batchnorm_case, 601, dict(shape=(6, 4))),
    "batchnorm1d_ncl_cumulative": (batchnorm_case, 602, dict(shape=(3, 4, 5), momentum=None, eps=1e-3)),
    "batchnorm1d_nc_two_rows": (batchnorm_case, 603, dict(shape=(2, 3), momentum=0.3)),
    "batchnorm1d_ncl_one_row": (batchnorm_case, 604, dict(shape=(1, 3, 4))),
    "batchnorm1d_untracked_noaffine": (batchnorm_case, 605, dict(shape=(5, 3, 2), affine=False,
                                                                  track_running_stats=False)),
    "einsum_f64": (einsum_case, 611, dict()),
    "functional_call_hvp": (functional_call_case, 621, dict()),
}


# ---- Hugging Face checkpoints: GPT-2 and Llama twins (issue 27) -----------------------------------
# transformers is not installable here, so each twin is written out in torch ops following
# transformers' GPT2LMHeadModel and LlamaForCausalLM, with their parameter names and shapes. A case
# is a directory as the Hub has it: model.safetensors (the weights only, under transformers' names),
# config.json, and twin_logits.safetensors (in.tokens (B, T) and out.logits (B, T, vocab), the
# twin's forward in the case's dtype), which examples/gpt/test_hf_checkpoint.cpp and the gpt CLI
# check read. Weights are N(0, 0.15^2) (embeddings N(0, 0.5^2), biases N(0, 0.1^2), norms' gains
# 1 + N(0, 0.1^2)) so that every term shows in the logits.


def gelu_new(x):
    """transformers' gelu_new (GPT-2's MLP): GELU's tanh form."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Conv1D(nn.Module):
    """transformers' Conv1D: a Linear whose weight is stored (in, out)."""

    def __init__(self, out_features, in_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.empty(out_features))

    def forward(self, x):
        return x @ self.weight + self.bias


class GPT2Attention(nn.Module):
    def __init__(self, d, heads, positions):
        super().__init__()
        self.heads = heads
        self.c_attn, self.c_proj = Conv1D(3 * d, d), Conv1D(d, d)
        # The causal mask and the masked score, buffers as older transformers saved them.
        self.register_buffer("bias", torch.tril(torch.ones(positions, positions)).view(1, 1, positions, positions))
        self.register_buffer("masked_bias", torch.tensor(-1e4))

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(B, T, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
        w = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
        causal = self.bias[:, :, :T, :T].bool()
        w = torch.where(causal, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        y = (torch.softmax(w, dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
        return self.c_proj(y)


class GPT2MLP(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(ff, d), Conv1D(d, ff)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["n_embd"]
        self.ln_1 = nn.LayerNorm(d, eps=c["layer_norm_epsilon"])
        self.attn = GPT2Attention(d, c["n_head"], c["n_positions"])
        self.ln_2 = nn.LayerNorm(d, eps=c["layer_norm_epsilon"])
        self.mlp = GPT2MLP(d, c["n_inner"] or 4 * d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["n_positions"], c["n_embd"])
        self.h = nn.ModuleList(GPT2Block(c) for _ in range(c["n_layer"]))
        self.ln_f = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_epsilon"])

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = GPT2Model(c)
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, tokens):
        return self.lm_head(self.transformer(tokens))


class LlamaRMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        # transformers computes in float32 for half inputs; float32 and float64 stay as they are
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    """transformers' rotate_half: feature j turns with feature j + d/2."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, self.heads, self.kv_heads = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        # transformers: config.head_dim when given (Gemma, some Llamas), else hidden_size // heads
        self.head_dim, self.theta = c.get("head_dim") or d // self.heads, c["rope_theta"]
        self.q_proj = nn.Linear(d, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, d, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        hd = self.head_dim
        q = self.q_proj(x).view(B, T, self.heads, hd).transpose(1, 2)     # (B, H, T, hd)
        k = self.k_proj(x).view(B, T, self.kv_heads, hd).transpose(1, 2)  # (B, G, T, hd)
        v = self.v_proj(x).view(B, T, self.kv_heads, hd).transpose(1, 2)
        # LlamaRotaryEmbedding: inv_freq = theta^(-2i/hd), angles (T, hd/2) repeated to (T, hd)
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        repeat = self.heads // self.kv_heads  # repeat_kv: query head i reads key/value head i // repeat
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        w = q @ k.transpose(-1, -2) / math.sqrt(hd)
        w = w + torch.triu(torch.full((T, T), torch.finfo(w.dtype).min, dtype=w.dtype), diagonal=1)
        y = (torch.softmax(w, dim=-1) @ v).transpose(1, 2).reshape(B, T, self.heads * hd)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.gate_proj = nn.Linear(d, ff, bias=False)
        self.up_proj = nn.Linear(d, ff, bias=False)
        self.down_proj = nn.Linear(ff, d, bias=False)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, eps = c["hidden_size"], c["rms_norm_eps"]
        self.input_layernorm = LlamaRMSNorm(d, eps)
        self.self_attn = LlamaAttention(c)
        self.post_attention_layernorm = LlamaRMSNorm(d, eps)
        self.mlp = LlamaMLP(d, c["intermediate_size"])

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(LlamaDecoderLayer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = LlamaRMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, tokens):
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = LlamaModel(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def forward(self, tokens):
        return self.lm_head(self.model(tokens))


HF_GPT2_CONFIG = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 300, "n_positions": 16,
                  "n_embd": 32, "n_layer": 2, "n_head": 4, "n_inner": None, "activation_function": "gelu_new",
                  "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
HF_LLAMA_CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 300, "hidden_size": 32,
                   "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
                   "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False}


def perturb_twin(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("wte.weight") or name.endswith("wpe.weight") or name.endswith("embed_tokens.weight"):
                p.normal_(0.0, 0.5)
            elif "ln_" in name or "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape)) if name.endswith("weight") else p.normal_(0.0, 0.1)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
            else:
                p.normal_(0.0, 0.15)


def bytes_to_unicode():
    """GPT-2's table: each byte spelt as a printable character (vocab.json's and merges.txt's spelling)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


# The text the twin's GPT-2 vocabulary learns its merges on.
VOCAB_TEXT = ("The licenses for most software and other practical works are designed to take away your freedom "
              "to share and change the works. By contrast, the GNU General Public License is intended to guarantee "
              "your freedom to share and change all versions of a program, to make sure it remains free software "
              "for all its users. When we speak of free software, we are referring to freedom, not price.")


def write_gpt2_vocabulary(directory, vocab_size):
    """vocab.json and merges.txt in GPT-2's formats, as the Hub's gpt2 repository has them: the 256
    bytes (ids 0..255 in the table's order), then vocab_size - 256 merges learnt on VOCAB_TEXT, each
    joining the most frequent adjacent pair within the words (" word" keeps its space, as GPT-2's)."""
    spell = bytes_to_unicode()
    words = [[spell[b] for b in w.encode()] for w in
             [("" if i == 0 else " ") + w for i, w in enumerate(VOCAB_TEXT.split(" "))]]
    vocab = {spell[b]: i for i, b in enumerate(spell)}
    merges = []
    while len(vocab) < vocab_size:
        counts = {}
        for w in words:
            for pair in zip(w, w[1:]):
                counts[pair] = counts.get(pair, 0) + 1
        best = max(sorted(counts), key=lambda pair: counts[pair])  # ties: the first in sorted order
        merges.append(best)
        vocab[best[0] + best[1]] = len(vocab)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if (w[i], w[i + 1]) == best:
                    w[i:i + 2] = [best[0] + best[1]]
                i += 1
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))


def hf_case(path, seed, *, arch, dtype="F64", hub_style=False, kv_heads=None, config_changes=None):
    """A twin's model.safetensors, config.json and logits. gpt2 with hub_style: the names as the
    Hub's gpt2 file has them (no "transformer." prefix, no lm_head.weight, each layer's attn.bias
    and attn.masked_bias buffers); otherwise as transformers' LMHeadModel state_dict, lm_head.weight
    included. kv_heads: the Llama's key/value heads, if not HF_LLAMA_CONFIG's; config_changes: other
    keys of the config replaced or added (head_dim)."""
    torch.manual_seed(seed)
    t = TORCH_DTYPES[dtype]
    config = HF_GPT2_CONFIG if arch == "gpt2" else HF_LLAMA_CONFIG
    if kv_heads is not None:
        config = {**config, "num_key_value_heads": kv_heads}
    config = {**config, **(config_changes or {})}
    model = (GPT2LMHeadModel if arch == "gpt2" else LlamaForCausalLM)(config)
    perturb_twin(model)
    model = model.to(t)
    tokens = torch.randint(0, config["vocab_size"], (2, 12))
    with torch.no_grad():
        logits = model(tokens)
    state = model.state_dict()  # the tied lm_head.weight is listed, as transformers' is
    if arch == "gpt2":
        if hub_style:
            state = {k.removeprefix("transformer."): v for k, v in state.items() if k != "lm_head.weight"}
        else:
            state = {k: v for k, v in state.items() if not k.endswith(".attn.bias") and not k.endswith("masked_bias")}
    directory = path.removesuffix(".safetensors")
    os.makedirs(directory, exist_ok=True)
    write_safetensors(os.path.join(directory, "model.safetensors"), state, {"format": "pt"})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({**config, "torch_dtype": "float32" if dtype == "F32" else "float64"}, f, indent=2)
        f.write("\n")
    common = {"format": "cppgrad-refs-1", "generator": "scripts/make_parity_refs.py", "torch": torch.__version__,
              "float_dtype": dtype, "arch": arch, "case": os.path.basename(directory)}
    write_safetensors(os.path.join(directory, "twin_logits.safetensors"), {"in.tokens": tokens, "out.logits": logits},
                      common)
    if arch == "gpt2" and hub_style:  # the tokenizer's files beside the weights, as the Hub's gpt2 has them
        write_gpt2_vocabulary(directory, config["vocab_size"])


HF_CASES = {
    "hf_gpt2_hub_f32": (hf_case, 501, dict(arch="gpt2", dtype="F32", hub_style=True)),
    "hf_gpt2_f64": (hf_case, 502, dict(arch="gpt2")),
    "hf_llama_f32": (hf_case, 503, dict(arch="llama", dtype="F32")),
    # as many key/value heads as heads: cppgrad keeps q, k and v in one fused matrix then
    "hf_llama_f64": (hf_case, 504, dict(arch="llama", kv_heads=4)),
    # heads wider than hidden_size / heads: config.json's head_dim (8 heads of 4 on 16 features)
    "hf_llama_head_dim_f64": (hf_case, 505, dict(arch="llama", kv_heads=2, config_changes=dict(
        hidden_size=16, intermediate_size=24, num_attention_heads=8, head_dim=4))),
}


# ---- the cases ----------------------------------------------------------------------------------
# name -> (function, seed, options). Each seed is fixed, so a case's file is the same on every run.

CASES = {
    # attn_mask of every kind, with the weights averaged or per head
    "mha_attn_bool2d": (mha_case, 101, dict(attn_mask="bool2d", need_weights=True)),
    "mha_attn_float2d": (mha_case, 102, dict(attn_mask="float2d", need_weights=True)),
    "mha_attn_bool3d": (mha_case, 103, dict(attn_mask="bool3d", need_weights=True, average_attn_weights=False)),
    "mha_attn_float3d": (mha_case, 104, dict(attn_mask="float3d", need_weights=True, average_attn_weights=False)),
    # a float key_padding_mask (the bool one is mha_e8h2_kpm). PyTorch 1.13 merges a float
    # key_padding_mask with an attn_mask by logical_or or masked_fill, not by adding as cppgrad
    # and later PyTorch do, so it is only tested alone.
    "mha_kpm_float": (mha_case, 105, dict(key_padding_mask="float", need_weights=True)),
    # both masks together
    "mha_both_bool": (mha_case, 106, dict(attn_mask="bool2d", key_padding_mask="bool", need_weights=True)),
    "mha_both_float3d": (mha_case, 107, dict(attn_mask="float3d", key_padding_mask="bool", need_weights=True,
                                             average_attn_weights=False)),
    # is_causal: self-attention, so the fused Q/K/V projection is covered too
    "mha_causal": (mha_case, 108, dict(attn_mask="causal", self_attention=True)),
    "mha_causal_kpm": (mha_case, 109, dict(attn_mask="causal", key_padding_mask="bool", self_attention=True,
                                           need_weights=True, average_attn_weights=False)),
    # bias=False, and separate projections for keys and values of other widths
    "mha_nobias": (mha_case, 110, dict(bias=False, attn_mask="bool2d", key_padding_mask="bool", need_weights=True)),
    "mha_kvdim": (mha_case, 111, dict(kdim=5, vdim=6, attn_mask="float2d", key_padding_mask="bool",
                                      need_weights=True, average_attn_weights=False)),
    "mha_kvdim_nobias": (mha_case, 112, dict(kdim=5, vdim=6, bias=False, need_weights=True)),
    # the layers: post-norm ReLU, and pre-norm GELU with another layer_norm_eps
    "encoder_layer_masks": (transformer_case, 201, dict(kind="TransformerEncoderLayer", src_mask="float2d",
                                                        src_key_padding_mask=True)),
    "encoder_layer_prenorm_gelu": (transformer_case, 202, dict(kind="TransformerEncoderLayer", activation="gelu",
                                                               norm_first=True, layer_norm_eps=1e-3,
                                                               src_mask="bool3d", src_key_padding_mask=True)),
    "decoder_layer_masks": (transformer_case, 203, dict(kind="TransformerDecoderLayer", tgt_mask="causal",
                                                        memory_mask="bool2d", tgt_key_padding_mask=True,
                                                        memory_key_padding_mask=True)),
    "decoder_layer_prenorm_gelu": (transformer_case, 204, dict(kind="TransformerDecoderLayer", activation="gelu",
                                                               norm_first=True, layer_norm_eps=1e-3,
                                                               tgt_mask="causal", memory_mask="float2d",
                                                               memory_key_padding_mask=True)),
    # the stacks, with and without their final norm
    "encoder_nonorm": (transformer_case, 205, dict(kind="TransformerEncoder", num_layers=2, final_norm=False,
                                                   src_mask="bool2d", src_key_padding_mask=True)),
    "encoder_norm_prenorm_gelu": (transformer_case, 206, dict(kind="TransformerEncoder", num_layers=2,
                                                              final_norm=True, activation="gelu", norm_first=True,
                                                              layer_norm_eps=1e-6, src_mask="float3d",
                                                              src_key_padding_mask=True)),
    "decoder_nonorm": (transformer_case, 207, dict(kind="TransformerDecoder", num_layers=2, final_norm=False,
                                                   tgt_mask="causal", memory_key_padding_mask=True)),
    "decoder_norm_prenorm_gelu": (transformer_case, 208, dict(kind="TransformerDecoder", num_layers=2,
                                                              final_norm=True, activation="gelu", norm_first=True,
                                                              layer_norm_eps=1e-6, tgt_mask="causal",
                                                              memory_mask="float2d", tgt_key_padding_mask=True,
                                                              memory_key_padding_mask=True)),
    # the whole model: every mask at once, then pre-norm GELU
    "transformer_masks": (transformer_case, 209, dict(kind="Transformer", src_mask="float2d", tgt_mask="causal",
                                                      memory_mask="bool2d", src_key_padding_mask=True,
                                                      tgt_key_padding_mask=True, memory_key_padding_mask=True)),
    "transformer_prenorm_gelu": (transformer_case, 210, dict(kind="Transformer", activation="gelu", norm_first=True,
                                                             layer_norm_eps=1e-6, num_encoder_layers=2,
                                                             src_mask="bool3d", tgt_mask="causal",
                                                             src_key_padding_mask=True,
                                                             memory_key_padding_mask=True)),
}
CASES.update(MODERN_CASES)
CASES.update(OPS_CASES)
CASES.update(HF_CASES)
CASES.update(ISSUE29_CASES)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "data"), help="where to write the files")
    parser.add_argument("cases", nargs="*", help="cases to write (default: all): " + ", ".join(CASES))
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)
    for name in args.cases or CASES:
        function, seed, options = CASES[name]
        path = os.path.normpath(os.path.join(args.out, name + ".safetensors"))
        function(path, seed, **options)
        written = [path] if os.path.exists(path) else [  # a Hugging Face case is a directory
            os.path.join(path.removesuffix(".safetensors"), f) for f in sorted(os.listdir(path.removesuffix(".safetensors")))]
        for f in written:
            print(f"{f}: {os.path.getsize(f)} bytes")


if __name__ == "__main__":
    main()
