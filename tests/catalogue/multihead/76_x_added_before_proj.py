# expect: shapes=1 weight_count=1 out_is_proj=0 attention_weights=2 causal=1
# why: x added to the joined heads before the projection (a residual, in the wrong place)
# mistake: not_joined_heads
# fails: out_is_proj wrong_value: did not receive the two heads' outputs joined side by side
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1) + x)
