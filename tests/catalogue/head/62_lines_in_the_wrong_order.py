# expect: shapes=0 weight_count=1 rows_and_mask=0 attention_weights=0 out_is_weighted_values=0 causal=0
# why: the scores computed on the line before the keys and queries they need
# mistake: used_before_assigned
# fails: shapes forward_error: UnboundLocalError
class Head(nn.Module):
    '''One head of causal self-attention.'''

    def __init__(self, head_size):
        super().__init__()
        # key, query, value: nn.Linear(n_embd, head_size, bias=False), in that order; tril: a buffer
        self.key = nn.Linear(n_embd, head_size, bias=False)     # what each position offers
        self.query = nn.Linear(n_embd, head_size, bias=False)   # what each position looks for
        self.value = nn.Linear(n_embd, head_size, bias=False)   # what it hands over
        self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))  # 1: may look

    def forward(self, x):
        B, T, C = x.shape
        # scaled scores, -inf above the diagonal, softmax kept in self.weights, weighted values
        scores = (q @ k.transpose(-2, -1)) * k.shape[-1] ** -0.5       # [B, T, T], scaled
        k, q = self.key(x), self.query(x)                              # [B, T, head_size] each
        scores = scores.masked_fill(self.tril[:T, :T] == 0, float('-inf'))  # hide the future
        self.weights = F.softmax(scores, dim=-1)                       # rows add up to 1
        return self.weights @ self.value(x)                            # [B, T, head_size]
