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

DTYPES = {torch.float64: ("F64", "<f8"), torch.bool: ("BOOL", "?")}


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
        print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
