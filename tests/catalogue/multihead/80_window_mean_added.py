# expect: shapes=1 weight_count=1 out_is_proj=0 attention_weights=2 causal=0
# why: the joined heads' mean over the window added before the projection
# mistake: sees_the_future
# fails: causal not_causal: changed earlier positions
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        joined = torch.cat([head(x) for head in self.heads], dim=-1)
        return self.proj(joined + joined.mean(1, keepdim=True))
