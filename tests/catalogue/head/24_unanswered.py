# expect: shapes=0 weight_count=0 rows_and_mask=0 attention_weights=0 out_is_weighted_values=0 causal=0
# why: still unanswered (the released stub)
# mistake: unanswered
# fails: shapes unanswered: still unanswered
# fails: weight_count unanswered: still unanswered
# fails: rows_and_mask unanswered: still unanswered
# fails: attention_weights unanswered: still unanswered
# fails: out_is_weighted_values unanswered: still unanswered
# fails: causal unanswered: still unanswered
class Head(nn.Module):
    '''One head of causal self-attention.'''

    def __init__(self, head_size):
        super().__init__()
        # key, query, value: nn.Linear(n_embd, head_size, bias=False), in that order; tril: a buffer
        raise NotImplementedError()

    def forward(self, x):
        B, T, C = x.shape
        # scaled scores, -inf above the diagonal, softmax kept in self.weights, weighted values
        raise NotImplementedError()
