# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: right, written differently: heads appended one by one, a for loop in forward
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList()
        for _ in range(2):
            self.heads.append(Head(16))
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        outs = []
        for head in self.heads:
            outs.append(head(x))
        return self.proj(torch.cat(outs, dim=-1))
