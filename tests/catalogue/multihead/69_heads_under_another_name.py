# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: the heads stored under another name than self.heads
# mistake: heads_missing
# fails: shapes structure: MultiHead has no self.heads
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.all_heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.all_heads], dim=-1))
