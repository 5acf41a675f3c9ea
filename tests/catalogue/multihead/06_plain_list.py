# expect: shapes=1 weight_count=0 out_is_proj=2 attention_weights=2 causal=1
# why: heads in a plain list: parameters() sees 1056 weights, not 4128
# mistake: plain_list
# fails: weight_count structure: 1056 weights to learn, not 4128
# says: nn.ModuleList([...])
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = [Head(16) for _ in range(2)]
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))
