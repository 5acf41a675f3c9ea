# expect: shapes=1 weight_count=1 out_is_proj=0 attention_weights=0 causal=1
# why: head 1 run twice, head 2 never
# mistake: heads_not_each_once
# fails: out_is_proj wrong_value: ran the heads [1, 1]
# says: forward ran the heads [1, 1]
# runner: kept no attention weights
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([self.heads[0](x), self.heads[0](x)], dim=-1))
