"""PyTorch's side of the gpt2 benchmarks: the same byte-level GPT as engine/models/gpt2.py in
torch.nn (token and position embeddings, pre-norm blocks of causal multi-head attention through
SDPA with bias-free q/k/v/o projections, a tanh-form GELU MLP, a final layer norm, the head tied to
the token table, cross-entropy), float32 with TF32 off, trained with fused AdamW: the peer our
training step is timed against."""
from __future__ import annotations


def build(torch, layers: int, width: int, heads: int, context: int, seed: int = 0):
    nn, F = torch.nn, torch.nn.functional
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(seed)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.q, self.k, self.v, self.o = (nn.Linear(width, width, bias=False)
                                              for _ in range(4))
            self.fc, self.proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            b, t, d = x.shape
            h = self.ln_1(x)
            q, k, v = (p(h).view(b, t, heads, d // heads).transpose(1, 2)
                       for p in (self.q, self.k, self.v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
            return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(256, width), nn.Embedding(context, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)

        def forward(self, tokens, targets):
            b, t = tokens.shape
            pos = torch.arange(t, device=tokens.device)
            x = self.wte(tokens) + self.wpe(pos)[None]
            for block in self.blocks:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.T
            return F.cross_entropy(logits.view(b * t, 256), targets.reshape(-1))

    model = GPT().cuda()
    # capturable: the step count on the device, so torch.cuda.graph can replay the step too
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True, capturable=True)
    return model, opt


def step_fn(model, opt, tokens, targets):
    """One training step on (tokens, targets), or on a batch passed to it (device tensors)."""
    def step(x=tokens, y=targets):
        opt.zero_grad(set_to_none=False)
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss
    return step


def engine_named(model) -> list[tuple[str, object]]:
    """The model's parameters under engine/models/gpt2.py's names, in GPT.named_parameters()'s
    order (both sides store a linear's weight as [out, in])."""
    named = [("wte", model.wte.weight), ("wpe", model.wpe.weight)]
    for i, b in enumerate(model.blocks):
        named += [(f"h.{i}.{n}", p) for n, p in (
            ("ln_1.weight", b.ln_1.weight), ("ln_1.bias", b.ln_1.bias),
            ("attn.q.weight", b.q.weight), ("attn.k.weight", b.k.weight),
            ("attn.v.weight", b.v.weight), ("attn.o.weight", b.o.weight),
            ("ln_2.weight", b.ln_2.weight), ("ln_2.bias", b.ln_2.bias),
            ("mlp.fc.weight", b.fc.weight), ("mlp.fc.bias", b.fc.bias),
            ("mlp.proj.weight", b.proj.weight), ("mlp.proj.bias", b.proj.bias))]
    return named + [("ln_f.weight", model.ln_f.weight), ("ln_f.bias", model.ln_f.bias)]


def load_engine_parameters(torch, model, host_params: dict) -> None:
    """Copy our model's initial parameters (name -> NumPy array, engine order's names) into the
    torch model, so both sides start from the same values and their first losses agree to
    rounding."""
    named = engine_named(model)
    missing = sorted({n for n, _ in named} - set(host_params))
    if missing:
        raise KeyError(f"no engine parameter for {', '.join(missing[:3])}: the two GPTs differ")
    with torch.no_grad():
        for name, p in named:
            p.copy_(torch.from_numpy(host_params[name]).reshape(p.shape))


def adamw_like_engine(torch, model, decays, lr: float = 1e-3, weight_decay: float = 0.01,
                      capturable: bool = False):
    """Fused AdamW with our AdamW's decay mask (`decays`: GPT.decays(), one bool per parameter in
    engine order): decay on the blocks' matrices, none on embeddings, norms and biases."""
    params = [p for _, p in engine_named(model)]
    if len(decays) != len(params):
        raise ValueError(f"{len(decays)} decay flags for {len(params)} parameters: pass "
                         "GPT.decays() of the same preset")
    groups = [{"params": [p for p, d in zip(params, decays) if d], "weight_decay": weight_decay},
              {"params": [p for p, d in zip(params, decays) if not d], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, fused=True, capturable=capturable)
