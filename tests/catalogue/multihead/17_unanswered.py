# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: still unanswered (the released stub)
# mistake: unanswered
# fails: shapes unanswered: still unanswered
# runner: still unanswered
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        # YOUR CODE HERE
        raise NotImplementedError()

    def forward(self, x):
        # YOUR CODE HERE
        raise NotImplementedError()
