# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: four heads of 16 and a projection from 64
# mistake: head_count
# fails: shapes structure: self.heads holds 4 heads
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(4)])
        self.proj = nn.Linear(4 * 16, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))
