# expect: shapes=0 weight_count=0 layer_norms=0 residuals=0 causal=0
# why: still unanswered (the released stub)
# mistake: unanswered
# fails: shapes unanswered: still unanswered
# fails: weight_count unanswered: still unanswered
# fails: layer_norms unanswered: still unanswered
# fails: residuals unanswered: still unanswered
# fails: causal unanswered: still unanswered
class Block(nn.Module):
    '''A transformer block: attention, then feed-forward, each added to its input.'''

    def __init__(self):
        super().__init__()
        # self.sa, then self.ffwd (Linear 32 -> 128, ReLU, Linear 128 -> 32), then self.ln1, self.ln2
        raise NotImplementedError()

    def forward(self, x):
        # x plus the attention of ln1(x); then that plus the feed-forward of its ln2
        raise NotImplementedError()
