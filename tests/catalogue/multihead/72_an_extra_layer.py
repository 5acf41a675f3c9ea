# expect: shapes=1 weight_count=0 out_is_proj=2 attention_weights=2 causal=1
# why: an extra layer that forward never uses (its weights still count)
# mistake: extra_weights
# fails: weight_count structure: weights to learn: 5184, expected 4128
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)
        self.extra = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))
