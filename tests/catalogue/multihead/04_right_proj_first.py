# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: right, but the projection is created before the heads (other random numbers)
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(n_embd, n_embd)
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])

    def forward(self, x):
        return self.proj(torch.cat([h(x) for h in self.heads], -1))
