# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: heads of the wrong size (32 each, and a projection from 64)
# mistake: head_size
# fails: shapes structure: Use Head(16)
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(32) for _ in range(2)])
        self.proj = nn.Linear(2 * n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))
