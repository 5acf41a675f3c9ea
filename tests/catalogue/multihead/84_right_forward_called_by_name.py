# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: the heads and the projection called through .forward(...): the same numbers
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj.forward(torch.cat([head.forward(x) for head in self.heads], dim=-1))
