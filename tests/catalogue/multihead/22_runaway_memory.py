# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: crash: runaway memory in __init__
# mistake: build_error
# says: allocate
# runner: allocate
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.hog = torch.ones(2 ** 40)
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))
