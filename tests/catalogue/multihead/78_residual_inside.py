# expect: shapes=1 weight_count=1 out_is_proj=0 attention_weights=2 causal=1
# why: x added to the projection's output (the block's residual, inside MultiHead)
# mistake: out_not_proj
# fails: out_is_proj wrong_value: forward's result is not self.proj of the joined heads
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return x + self.proj(torch.cat([head(x) for head in self.heads], dim=-1))
