# expect: shapes=1 weight_count=1 out_is_proj=0 attention_weights=0 causal=0
# why: the lecture's dropout 0.2 after the projection, left on
# mistake: dropout_on
# fails: out_is_proj wrong_value: two runs of your MultiHead on the same input gave different numbers
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)
        self.dropout = nn.Dropout(0.2)

    def forward(self, x):
        out = torch.cat([h(x) for h in self.heads], dim=-1)
        return self.dropout(self.proj(out))
