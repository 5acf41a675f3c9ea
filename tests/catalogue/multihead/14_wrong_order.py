# expect: shapes=1 weight_count=1 out_is_proj=0 attention_weights=2 causal=1
# why: heads joined in the wrong order
# mistake: heads_wrong_order
# says: joined in the wrong order
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([self.heads[1](x), self.heads[0](x)], dim=-1))
