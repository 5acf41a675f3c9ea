# expect: shapes=1 weight_count=1 rows_and_mask=1 attention_weights=2 out_is_weighted_values=1 causal=1
# why: the layers initialised the answer's own way (nn.init): the checks load their fixed weights anyway
class Head(nn.Module):
    '''One head of causal self-attention.'''

    def __init__(self, head_size):
        super().__init__()
        # key, query, value: nn.Linear(n_embd, head_size, bias=False), in that order; tril: a buffer
        self.key = nn.Linear(n_embd, head_size, bias=False)     # what each position offers
        self.query = nn.Linear(n_embd, head_size, bias=False)   # what each position looks for
        self.value = nn.Linear(n_embd, head_size, bias=False)   # what it hands over
        self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))  # 1: may look
        for layer in (self.key, self.query, self.value):
            nn.init.normal_(layer.weight, std=0.02)

    def forward(self, x):
        B, T, C = x.shape
        # scaled scores, -inf above the diagonal, softmax kept in self.weights, weighted values
        k, q = self.key(x), self.query(x)                              # [B, T, head_size] each
        scores = (q @ k.transpose(-2, -1)) * k.shape[-1] ** -0.5       # [B, T, T], scaled
        scores = scores.masked_fill(self.tril[:T, :T] == 0, float('-inf'))  # hide the future
        self.weights = F.softmax(scores, dim=-1)                       # rows add up to 1
        return self.weights @ self.value(x)                            # [B, T, head_size]
