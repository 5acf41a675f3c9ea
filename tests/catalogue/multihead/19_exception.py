# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: crash: an exception in __init__
# mistake: build_error
# says: ValueError: not today
# runner: not today
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("not today")
