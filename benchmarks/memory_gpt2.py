"""What a gpt2 training step keeps alive when its backward starts, measured on the CPU (issue 18):
the bytes each op's tape node keeps (its saved values, as the rules of a profile declare them
with engine/tape_saves.py's saves(...)), per kind, beside what PyTorch's autograd keeps for the
same model (benchmarks/torch_gpt.py) and beside the tape before the saves declarations (every
node kept all its inputs and its output, and the graph kept every intermediate tensor).

The forward runs in NumPy at the preset's width, heads and sequence length with batch 1 and one,
then two, blocks; activations grow linearly in the batch and the blocks, so those two runs give the
preset's figures exactly (each kind's bytes = batch * (outside + blocks * per block)). A third run
checks with tracemalloc that nothing but the tape (and the model's mask cache) holds NumPy memory
after the forward: the gap between "live (tracemalloc)" and "kept (CPU rules)" is what else lives.

    python benchmarks/memory_gpt2.py --preset gpt2-124m [--profile flash_cuda] [--seq-len T]

The first estimate is at the start of the backward: parameters, AdamW's two moments and, on
PyTorch's side, the gradients (its step zeroes them in place; ours sets them to None), plus what
each side keeps. The second replays our backward's walk over the recorded graph (backward_peak):
the most bytes of kept values and cotangents live at once, plus parameters, moments, the cuBLAS
workspace and between none and all of the parameters' gradients; what a rule allocates inside
itself (layer norm's float64 column partials, flash attention's row statistics) is left out.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tracemalloc
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MIB = 2 ** 20
F32 = 4


def _block(x):
    while getattr(x, "base", None) is not None:
        x = x.base
    return x


@dataclasses.dataclass
class Event:
    op: str
    arrays: tuple
    out: object
    params: dict
    node: object = None


def forward_events(config, batch: int, seq_len: int, seed: int = 0):
    """(the model, every recorded op of one loss forward in order, the loss)."""
    from engine.models import gpt2
    from engine.ops import _dispatch
    events: list[Event] = []
    original = _dispatch.record

    def spy(op, inputs, arrays, out, rule, params, session):
        node = original(op, inputs, arrays, out, rule, params, session)
        events.append(Event(op, tuple(arrays), out, params, node))
        return node
    model = gpt2.GPT(config, seed)
    tokens, targets = _batch(batch, seq_len)
    _dispatch.record = spy
    try:
        loss = model.loss(tokens, targets)
    finally:
        _dispatch.record = original
    return model, events, loss


def _batch(batch: int, seq_len: int):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (batch, seq_len + 1))
    return data[:, :-1], data[:, 1:]


def rules_of(profile_name: str):
    """op label -> the VJP rule the profile's plan runs for it."""
    from engine.models import gpt2
    from engine.ops._dispatch import vjp_function
    from engine.profile import profile_named
    profile = profile_named(profile_name)
    ops = gpt2.ops_for(profile)
    plan = profile.accept_graph(ops)
    return {op.label: vjp_function(plan.kernel(op)) for op in ops}


def kept_blocks(model, events, rules) -> list[list[tuple[str, int, int]]]:
    """Per event, the allocations its node keeps as (kind, allocation id, bytes), parameters
    left out; rules None: every input and output (the tape before saves(...)). The reference
    provider's reshape copies; on CUDA a reshape is a view of its input, so its output counts as
    its input's allocation, as the device would hold it."""
    from engine.tape_saves import Unsaved, stand_ins
    params = {id(_block(p.buffer.data)) for p in model.parameters()}
    alias: dict[int, object] = {}
    for e in events:
        if e.op == "reshape":
            src = _block(e.arrays[0])
            alias[id(_block(e.out))] = alias.get(id(src), src)
    out_lists = []
    for e in events:
        if rules is None:
            inputs, out = e.arrays, e.out
        else:
            inputs, out = stand_ins(rules[e.op], e.arrays, e.out)
        named = [(e.op, a) for a in inputs + (out,)] + [
            ("mask (model cache)" if k == "mask" else f"{e.op} {k}", v)
            for k, v in e.params.items()]
        kept = []
        for kind, a in named:
            if a is None or isinstance(a, Unsaved) or not isinstance(a, np.ndarray):
                continue
            root = _block(a)
            root = alias.get(id(root), root)
            if id(root) not in params:
                kept.append((kind, id(root), root.nbytes))
        out_lists.append(kept)
    return out_lists


def kept_by_kind(model, events, rules) -> dict[str, int]:
    """Bytes per kind kept by the tape: each allocation once, under the first op keeping it."""
    seen: set[int] = set()
    kinds: dict[str, int] = defaultdict(int)
    for kept in kept_blocks(model, events, rules):
        for kind, key, nbytes in kept:
            if key not in seen:
                seen.add(key)
                kinds[kind] += nbytes
    return dict(kinds)


# Rules whose gradients are views of their cotangent on CUDA (no new allocation): add returns g
# for both inputs, reshape a view of it.
ALIASING = ("add", "reshape")


def backward_peak(model, events, rules, loss) -> int:
    """The most bytes of activations and cotangents live at once during the backward of `loss`,
    by replaying the tape's walk (engine/autograd.py): each node's kept allocations go once every
    node keeping them has run, a cotangent once its node ran; a rule's gradients are new arrays
    (views of g for ALIASING rules), a second gradient of one tensor a new sum. Parameter
    gradients and what a rule allocates inside itself are left out (the report adds the former)."""
    from engine.autograd import Node, _topological
    blocks = kept_blocks(model, events, rules)
    of_node = {id(e.node): i for i, e in enumerate(events)}
    users: dict[int, int] = defaultdict(int)
    size: dict[int, int] = {}
    for kept in blocks:
        for key, nbytes in {(k, b) for _, k, b in kept}:
            users[key] += 1
            size[key] = nbytes
    kept_live = sum(size.values())
    fresh = iter(range(-1, -10 ** 9, -1))          # ids of cotangent arrays
    cot_size: dict[int, int] = {}
    pending: dict[int, int] = {}                   # vertex id -> cotangent array id
    root = next(fresh)
    cot_size[root] = 4
    pending[id(loss.node)] = root
    peak = 0

    def cot_live() -> int:
        return sum(cot_size[c] for c in set(pending.values()))
    for v in reversed(_topological(loss.node)):
        if not isinstance(v, Node):
            pending.pop(id(v), None)               # a parameter's gradient: counted apart
            continue
        if id(v) not in of_node:                   # a part of a split output (autograd.split):
            g = pending.pop(id(v), None)           # its cotangent goes on as that part, no copy
            if g is not None:
                pending[(id(v.inputs[0]), v.params["index"])] = g
            continue
        parts = [k for k in pending if isinstance(k, tuple) and k[0] == id(v)]
        if parts:                                  # the parts' cotangents, each its own array
            gs = [pending.pop(k) for k in parts]
            g = next(fresh)
            cot_size[g] = sum(cot_size[c] for c in gs)
        else:
            g = pending.pop(id(v), None)
        if g is None:
            continue
        e = events[of_node[id(v)]]
        new = []
        for edge, shape in zip(v.inputs, v.shapes):
            if edge is None:
                continue
            c = g if e.op in ALIASING else next(fresh)
            cot_size[c] = 4 * int(np.prod(shape))
            new.append((edge, c))
        made = sum(cot_size[c] for c in {c for _, c in new if c != g})
        peak = max(peak, kept_live + cot_live() + cot_size[g] + made)
        for key in {k for _, k, _ in blocks[of_node[id(v)]]}:
            users[key] -= 1
            if not users[key]:
                kept_live -= size[key]
        for edge, c in new:
            if id(edge) in pending:                # accumulate: the sum is a new array
                s = next(fresh)
                cot_size[s] = cot_size[c]
                pending[id(edge)] = s
            else:
                pending[id(edge)] = c
        peak = max(peak, kept_live + cot_live())
    return peak


def torch_kept(config, batch: int, seq_len: int, layers: int) -> dict[str, int]:
    """What PyTorch's autograd saves for benchmarks/torch_gpt.py's model (float32): per block the
    layer norms' inputs with mean and rstd, the linears' inputs (q/k/v share ln_1's output; o's is
    SDPA's output, whose [B, T, H, D] storage the merge reads as a view), SDPA's q, k, v, out and
    logsumexp, GELU's input (fc's output; proj's input is GELU's output); then ln_f and the head's
    input, cross-entropy's log-softmax, and the embeddings' indices (int64)."""
    n, d, h = batch * seq_len, config.width, config.heads
    unit = n * d * F32
    stats = 2 * n * F32
    return {
        "layer_norm": (2 * layers + 1) * (unit + stats),
        "matmul": layers * (unit + unit + 4 * unit) + unit,
        "scaled_dot_product_attention": layers * (4 * unit + batch * h * seq_len * F32),
        "gelu": layers * 4 * unit,
        "log_softmax": n * 256 * F32 + n * 8,
        "gather indices": 2 * n * 8,
    }


def parameter_bytes(config) -> int:
    from engine.models import gpt2
    d, layers = config.width, config.layers
    block = 4 * d * d + 2 * (4 * d * d) + 4 * d + d + 4 * d   # q k v o, fc, proj, biases, norms
    return F32 * (layers * block + gpt2.VOCAB * d + config.context * d + 2 * d)


def live_after_forward(config, batch: int, seq_len: int) -> tuple[int, int]:
    """(NumPy bytes live after one loss forward beyond the model's own, what the CPU plan's tape
    keeps): tracemalloc's view, to check that the tape is all that holds the activations."""
    from engine.models import gpt2
    tracemalloc.start()
    model = gpt2.GPT(config, 0)
    tokens, targets = _batch(batch, seq_len)
    before = tracemalloc.get_traced_memory()[0]
    loss = model.loss(tokens, targets)
    live = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    kept = sum(a.nbytes for a in _kept_arrays(loss, model))
    return live, kept


def _kept_arrays(loss, model) -> list:
    """Every distinct allocation the loss's graph keeps (node saved values, params), parameters
    left out, plus the model's cached masks."""
    from engine.autograd import Node, _topological
    params = {id(_block(p.buffer.data)) for p in model.parameters()}
    out, seen = [], set()
    for v in _topological(loss.node):
        if not isinstance(v, Node):
            continue
        for a in v.kept() + [x for x in v.params.values() if isinstance(x, np.ndarray)]:
            root = _block(a)
            if isinstance(root, np.ndarray) and id(root) not in params and id(root) not in seen:
                seen.add(id(root))
                out.append(root)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="gpt2-124m")
    parser.add_argument("--profile", default="flash_cuda",
                        help="whose VJP rules' declarations count (default flash_cuda)")
    parser.add_argument("--seq-len", type=int, default=None,
                        help="measure and report at this T (default: the preset's)")
    parser.add_argument("--batch-size", type=int, default=None)
    args = parser.parse_args(argv)
    from engine.models import gpt2
    config = gpt2.preset(args.preset)
    t = args.seq_len or config.seq_len
    b = args.batch_size or config.batch_size
    gpt2.check_shape(config, b, t)
    rules = {"ours": rules_of(args.profile)}
    per = {}
    for layers in (1, 2):
        model, events, loss = forward_events(dataclasses.replace(config, layers=layers), 1, t)
        per[layers] = {"old tape": kept_by_kind(model, events, None),
                       "ours": kept_by_kind(model, events, rules["ours"]),
                       "peak": {"ours": backward_peak(model, events, rules["ours"], loss)}}
        del model, events, loss

    def scaled(side: str) -> dict[str, int]:
        kinds = set(per[1][side]) | set(per[2][side])
        one = {k: per[1][side].get(k, 0) for k in kinds}
        block = {k: per[2][side].get(k, 0) - one[k] for k in kinds}
        return {k: b * (one[k] + (config.layers - 1) * block[k]) for k in kinds}
    old, ours = scaled("old tape"), scaled("ours")
    torch = torch_kept(config, b, t, config.layers)
    print(f"gpt2 {args.preset}: B{b} T{t}, {config.layers} layers, width {config.width}, "
          f"{config.heads} heads; ours = the tape of profile {args.profile}")
    print(f"\nkept when the backward starts (MiB)\n{'kind':34s}{'old tape':>10s}{'ours':>10s}"
          f"{'torch':>10s}")
    for k in sorted(set(old) | set(ours) | set(torch), key=lambda k: -old.get(k, 0)):
        print(f"{k:34s}{old.get(k, 0) / MIB:10.1f}{ours.get(k, 0) / MIB:10.1f}"
              f"{torch.get(k, 0) / MIB:10.1f}")
    tot = {name: sum(x.values()) for name, x in (("old", old), ("ours", ours), ("torch", torch))}
    print(f"{'total':34s}{tot['old'] / MIB:10.1f}{tot['ours'] / MIB:10.1f}"
          f"{tot['torch'] / MIB:10.1f}")
    p = parameter_bytes(config)
    ours_peak, torch_peak = 3 * p + tot["ours"], 4 * p + tot["torch"]
    print(f"\nparameters {p / MIB:.1f} MiB; expected at the start of the backward: ours "
          f"{ours_peak / MIB:.0f} MiB (parameters + AdamW m, v + kept), torch "
          f"{torch_peak / MIB:.0f} MiB (+ its zeroed gradients): ratio "
          f"{ours_peak / torch_peak:.3f} (goal <= 1.1)")
    act = scaled("peak")["ours"]
    from engine.providers.cublas_lib import WORKSPACE_BYTES as work   # allocated once
    low, high = 3 * p + act + work, 4 * p + act + work
    print(f"expected peak of our step: activations and cotangents at most {act / MIB:.0f} MiB "
          f"during the backward (replayed walk), + parameters, AdamW m, v, the cuBLAS "
          f"workspace ({work / MIB:.0f} MiB) and the gradients made so far: between "
          f"{low / MIB:.0f} and {high / MIB:.0f} MiB (rules' own temporaries on top)")
    live, kept = live_after_forward(dataclasses.replace(config, layers=1), 1, t)
    print(f"\ncheck (1 block, B1, CPU rules): live after the forward (tracemalloc) "
          f"{live / MIB:.1f} MiB, kept by the tape and the mask cache {kept / MIB:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
