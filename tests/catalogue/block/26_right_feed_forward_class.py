# expect: shapes=1 weight_count=1 layer_norms=2 residuals=2 causal=1
# why: right, written differently: the lecture's FeedFoward class wrapping the nn.Sequential (as the gpt lesson's given code does), with its dropout at p = 0
class FeedFoward(nn.Module):
    '''The lecture's feed-forward: an nn.Sequential in a class of its own.'''

    def __init__(self, n_embd):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.ReLU(), nn.Linear(4 * n_embd, n_embd),
                                 nn.Dropout(0.0))

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    '''A transformer block: attention, then feed-forward, each added to its input.'''

    def __init__(self):
        super().__init__()
        # self.sa, then self.ffwd (Linear 32 -> 128, ReLU, Linear 128 -> 32), then self.ln1, self.ln2
        self.sa = MultiHead()                                   # gather from earlier positions
        self.ffwd = FeedFoward(n_embd)                          # then think, position by position
        self.ln1 = nn.LayerNorm(n_embd)                         # normalises the attention's input
        self.ln2 = nn.LayerNorm(n_embd)                         # normalises the feed-forward's input

    def forward(self, x):
        # x plus the attention of ln1(x); then that plus the feed-forward of its ln2
        x = x + self.sa(self.ln1(x))                            # residual around the attention
        x = x + self.ffwd(self.ln2(x))                          # residual around the feed-forward
        return x                                                # [B, T, 32], like the input
