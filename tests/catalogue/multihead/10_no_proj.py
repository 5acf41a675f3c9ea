# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: the projection is missing
# mistake: proj_missing
# fails: shapes structure: no self.proj
# runner: no self.proj
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)
