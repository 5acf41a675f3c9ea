# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: right, written differently: the heads batched with einsum over their own weights (they keep their weights)
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        # every head's key, query and value weights at once: [heads, head_size, n_embd]
        wk, wq, wv = (torch.stack([getattr(h, name).weight for h in self.heads]) for name in ('key', 'query', 'value'))
        k = torch.einsum('btc,hsc->bhts', x, wk)
        q = torch.einsum('btc,hsc->bhts', x, wq)
        v = torch.einsum('btc,hsc->bhts', x, wv)
        scores = torch.einsum('bhts,bhus->bhtu', q, k) * k.shape[-1] ** -0.5
        scores = scores.masked_fill(self.heads[0].tril[:T, :T] == 0, float('-inf'))
        weights = F.softmax(scores, dim=-1)                    # [B, heads, T, T]
        for i, head in enumerate(self.heads):
            head.weights = weights[:, i]                       # what each head would keep
        out = torch.einsum('bhtu,bhus->bths', weights, v).reshape(B, T, -1)   # heads side by side
        return self.proj(out)
