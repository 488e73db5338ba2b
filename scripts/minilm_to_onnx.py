"""Writes all-MiniLM-L6-v2 as an ONNX graph, built from the model's own safetensors weights.

    python scripts/minilm_to_onnx.py <model dir> <output.onnx>

The graph is BERT as sentence-transformers runs it: word + position + token-type-0 embeddings, layer norm, six
encoder layers (12-head self-attention with the padding mask, exact erf GELU), mean pooling over the attention
mask and L2 normalisation. Inputs `input_ids` and `attention_mask` (int64, [batch, tokens]); output
`sentence_embedding` (float32, [batch, hidden]). Nothing is downloaded: the weights are the package's.

The weights go to `<output>.data` beside the graph, and `weights.json` gives that file's size and lists each float
tensor stored there (name, element type, dims, offset, length): the embedder maps the file once and hands every
session the same tensors, so ONNX Runtime keeps one packed copy of each matrix for all sessions.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file

OPSET = 17  # LayerNormalization
# Element types of the tensors in the weights file, as weights.json names them.
TYPES = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16"}


def build(model_dir: Path) -> onnx.ModelProto:
    config = json.loads((model_dir / "config.json").read_text())
    weights = load_file(str(model_dir / "model.safetensors"))
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_size, eps = hidden // heads, config["layer_norm_eps"]
    nodes, initializers = [], {}

    def const(name, array):
        initializers.setdefault(name, numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def weight(key):
        return const(key, weights[key].astype(np.float32))

    def linear(x, prefix, out):
        # torch's Linear keeps [out, in]; MatMul wants [in, out].
        w = const(f"{prefix}.weight.T", np.ascontiguousarray(weights[f"{prefix}.weight"].T.astype(np.float32)))
        return node("Add", [node("MatMul", [x, w], f"{out}.mm"), weight(f"{prefix}.bias")], out)

    def layer_norm(x, prefix, out):
        return node("LayerNormalization", [x, weight(f"{prefix}.weight"), weight(f"{prefix}.bias")], out,
                    axis=-1, epsilon=eps)

    # Embeddings: positions 0..tokens, token type 0 for every token (single-segment input).
    tokens = node("Shape", ["input_ids"], "tokens", start=1, end=2)
    positions = node("Slice", [weight("embeddings.position_embeddings.weight"), const("zero", np.array([0])), tokens,
                               const("axis0", np.array([0]))], "positions")
    # The word-embedding table (30,522 × 384) is stored as float16: each query reads only its own rows, so this
    # halves what a process maps for it (47 to 23 MB) at no measurable cost to the vectors.
    table = const("embeddings.word_embeddings.weight.f16", weights["embeddings.word_embeddings.weight"].astype(np.float16))
    words = node("Cast", [node("Gather", [table, "input_ids"], "words.f16")], "words", to=TensorProto.FLOAT)
    segment = const("segment0", weights["embeddings.token_type_embeddings.weight"][0].astype(np.float32))
    x = node("Add", [node("Add", [words, positions], "emb.wp"), segment], "emb.sum")
    x = layer_norm(x, "embeddings.LayerNorm", "emb")

    # Padding mask as an additive bias on the attention scores: [batch, 1, 1, tokens].
    mask = node("Cast", ["attention_mask"], "mask", to=TensorProto.FLOAT)
    masked = node("Sub", [const("one", np.float32(1.0)), mask], "mask.inverse")
    bias = node("Mul", [masked, const("neg", np.float32(-1e4))], "mask.bias.2d")
    bias = node("Unsqueeze", [bias, const("axes12", np.array([1, 2]))], "mask.bias")

    split_heads = const("split_heads", np.array([0, 0, heads, head_size]))
    merge_heads = const("merge_heads", np.array([0, 0, hidden]))
    scale = const("scale", np.float32(1.0 / math.sqrt(head_size)))
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"
        q, k, v = (node("Reshape", [linear(x, f"{p}.attention.self.{n}", f"l{i}.{n}"), split_heads], f"l{i}.{n}.h")
                   for n in ("query", "key", "value"))
        q = node("Transpose", [q], f"l{i}.q.t", perm=[0, 2, 1, 3])
        k = node("Transpose", [k], f"l{i}.k.t", perm=[0, 2, 3, 1])
        v = node("Transpose", [v], f"l{i}.v.t", perm=[0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [q, k], f"l{i}.qk"), scale], f"l{i}.scaled")
        probs = node("Softmax", [node("Add", [scores, bias], f"l{i}.masked")], f"l{i}.probs", axis=-1)
        context = node("Transpose", [node("MatMul", [probs, v], f"l{i}.ctx.h")], f"l{i}.ctx.t", perm=[0, 2, 1, 3])
        context = node("Reshape", [context, merge_heads], f"l{i}.ctx")
        attended = linear(context, f"{p}.attention.output.dense", f"l{i}.attn")
        x = layer_norm(node("Add", [attended, x], f"l{i}.attn.res"), f"{p}.attention.output.LayerNorm", f"l{i}.x1")
        h = linear(x, f"{p}.intermediate.dense", f"l{i}.inter")
        # GELU, exact: 0.5 · h · (1 + erf(h / √2)).
        erf = node("Erf", [node("Mul", [h, const("inv_sqrt2", np.float32(1 / math.sqrt(2)))], f"l{i}.g.s")], f"l{i}.g.e")
        gelu = node("Mul", [node("Mul", [h, node("Add", [erf, "one"], f"l{i}.g.a")], f"l{i}.g.m"),
                            const("half", np.float32(0.5))], f"l{i}.gelu")
        out = linear(gelu, f"{p}.output.dense", f"l{i}.out")
        x = layer_norm(node("Add", [out, x], f"l{i}.out.res"), f"{p}.output.LayerNorm", f"l{i}.x")

    # Mean pooling over real tokens, then L2 normalisation.
    weights3 = node("Unsqueeze", [mask, const("axis2", np.array([2]))], "pool.mask")
    summed = node("ReduceSum", [node("Mul", [x, weights3], "pool.masked"), const("axis1", np.array([1]))],
                  "pool.sum", keepdims=0)
    count = node("Max", [node("ReduceSum", [weights3, "axis1"], "pool.count.raw", keepdims=0),
                         const("tiny", np.float32(1e-9))], "pool.count")
    mean = node("Div", [summed, count], "pool.mean")
    node("LpNormalization", [mean], "sentence_embedding", axis=-1, p=2)

    graph = helper.make_graph(
        nodes, "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "tokens"]) for n in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        list(initializers.values()))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="agent-memory")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    out = Path(sys.argv[2])
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(build(Path(sys.argv[1])), str(out), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=out.name + ".data", size_threshold=1024)
    # The float tensors in the weights file, for the embedder to share between its sessions (any other tensor
    # ONNX Runtime reads from the file itself).
    data = out.with_name(out.name + ".data")
    saved = onnx.load_model(str(out), load_external_data=False)
    tensors = []
    for t in saved.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL and t.data_type in TYPES:
            place = {entry.key: entry.value for entry in t.external_data}
            tensors.append({"name": t.name, "type": TYPES[t.data_type], "dims": list(t.dims),
                            "offset": int(place.get("offset", 0)), "length": int(place["length"])})
    head = f'"file": {json.dumps(data.name)}, "bytes": {data.stat().st_size}'
    lines = ",\n".join("  " + json.dumps(t) for t in tensors)
    manifest = out.with_name("weights.json")
    manifest.write_text(f'{{{head}, "tensors": [\n{lines}\n]}}\n')
    for written in (out, data, manifest):
        written.chmod(0o644)
    print(f"wrote {out}")
