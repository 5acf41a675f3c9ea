# expect: shapes=0 weight_count=1 out_is_proj=0 attention_weights=0 causal=0
# why: torch.stack(..., dim=-1) instead of torch.cat: a new dimension, not side by side
# mistake: stack_not_cat
# fails: shapes wrong_shape: torch.stack adds a new dimension
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.stack([head(x) for head in self.heads], dim=-1))
