"""Attention plots: each head's weights for one window as a heatmap."""
import matplotlib.pyplot as plt
import torch


def show_letter(ch):
    return "\u23ce" if ch == "\n" else ch


def head_weights(mh, h, window=0):
    """[n_heads, T, T] attention weights of window `window` for mh's heads on h."""
    with torch.no_grad():
        mh(h)
        return torch.stack([head.weights[window] for head in mh.heads])


def attention_explorer(mh, h, window_text, window=0):
    """Heatmaps of every head's weights for one window, on one colour scale."""
    weights = head_weights(mh, h, window)
    letters = [show_letter(ch) for ch in window_text]
    fig, axes = plt.subplots(1, len(weights), figsize=(4.2 * len(weights), 4))
    for i, (ax, w) in enumerate(zip(axes, weights), 1):
        masked = torch.where(torch.tril(torch.ones_like(w)) > 0, w, torch.nan)
        ax.imshow(masked, vmin=0, vmax=float(weights.max()), cmap="viridis")
        ax.set_title(f"head {i}")
        ax.set_xticks(range(len(letters)), letters)
        ax.set_yticks(range(len(letters)), [f"{t} {c}" for t, c in enumerate(letters)])
        ax.set_xlabel("looks at")
        ax.set_ylabel("position that looks")
    plt.show()
