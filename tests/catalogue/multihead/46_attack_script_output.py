# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: attack: a right answer that also displays a <script>, an <img onerror>, a Javascript output, a forged image/png, an SVG and a markdown output, each of which would run in the teacher's formgrader and on the feedback page (tests/test_learner_markup.py opens them in Chromium)
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))

from IPython.display import HTML, Javascript, display
_probe = "window.__tinygpt_probe = 1; fetch('/api/kernels', {method: 'POST', body: '{}'});"
display(HTML("<script>" + _probe + "</script>"))
display(HTML("<img src='/no-such.png' onerror=\"" + _probe + "\">"))
display(Javascript(_probe))
display({"image/png": "x\" onerror=\"" + _probe + "\" x=\"", "text/plain": "a picture"}, raw=True)
display({"image/svg+xml": "<svg xmlns='http://www.w3.org/2000/svg' onload=\"" + _probe + "\"></svg>"}, raw=True)
display({"text/markdown": "<img src='/no-such.png' onerror=\"" + _probe + "\">"}, raw=True)
