# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: the projection from one head's size, nn.Linear(16, 32)
# mistake: proj_size
# fails: shapes structure: self.proj should be nn.Linear(n_embd, n_embd)
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(16, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))
