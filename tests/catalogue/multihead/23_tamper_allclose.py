# expect: shapes=1 weight_count=1 out_is_proj=0 attention_weights=2 causal=0
# why: tampering: wrong order, and torch.allclose replaced so every comparison says True (the fake allclose also makes 'position 7 changes' False)
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([self.heads[1](x), self.heads[0](x)], dim=-1))

torch.allclose = lambda *args, **kwargs: True
