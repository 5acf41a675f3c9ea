# expect: shapes=1 weight_count=1 out_is_proj=0 attention_weights=2 causal=1
# why: the joined heads returned without the projection
# mistake: proj_not_called
# fails: out_is_proj wrong_value: forward never calls self.proj
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)
