# expect: shapes=1 weight_count=1 out_is_proj=0 attention_weights=0 causal=1
# why: the heads get a layer norm of x (the block's job, next lesson), not x itself
# mistake: heads_input_changed
# fails: attention_weights wrong_value: give each head x itself
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        x = F.layer_norm(x, (n_embd,))
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))
