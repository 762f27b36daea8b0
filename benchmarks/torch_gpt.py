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
    def step():
        opt.zero_grad(set_to_none=False)
        loss = model(tokens, targets)
        loss.backward()
        opt.step()
        return loss
    return step
