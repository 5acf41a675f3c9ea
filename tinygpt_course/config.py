"""The course's sizes, in one place (like nanoGPT's GPTConfig): data, checks, messages and the
lessons' set-up cells read them from here."""
from dataclasses import dataclass


@dataclass(frozen=True)
class CourseConfig:
    batch_size: int = 32      # windows in the lessons' batch
    block_size: int = 8       # letters in a window (the context the model sees)
    n_embd: int = 32          # numbers per letter
    n_heads: int = 2          # heads in MultiHead
    head_size: int = 16       # numbers each head gives: n_heads * head_size == n_embd
    vocab_size: int = 27      # '\n' and the 26 letters
    n_layer: int = 2          # blocks in the whole model (the gpt lesson)
    batch_seed: int = 1337    # the batch every learner, the grader and the narrative see
    ffwd_mult: int = 4        # the feed-forward widens each position's n_embd numbers this many times

    @property
    def last(self):
        """The last position of a window (it sees every position)."""
        return self.block_size - 1

    @property
    def ffwd_hidden(self):
        """The feed-forward's inner size: ffwd_mult * n_embd numbers per position."""
        return self.ffwd_mult * self.n_embd


SIZES = CourseConfig()
