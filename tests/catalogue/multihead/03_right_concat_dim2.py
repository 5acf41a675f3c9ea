# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: right, written differently: torch.concat and dim=2
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16), Head(16)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.concat([self.heads[0](x), self.heads[1](x)], dim=2))
