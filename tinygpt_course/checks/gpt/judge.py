"""The trusted half of the gpt checks: diagnoses from two records.

``LESSON.judge(check_id, rec, ref)`` compares the learner's record with ``ref``, the record the
same extract made of the lesson's solution under the same fixed weights, and names the likely
mistake. Every fact comes from raw values: parameter names and shapes, tensors, what
``F.cross_entropy`` and ``torch.multinomial`` received, the stand-in's table and the contexts
generate gave it. Nothing here runs learner code or computes the lesson's answer: the expected
numbers are the solution's, in ``ref``.
"""
import torch
import torch.nn.functional as F

from ...config import SIZES
from ..hints import place
from ..protocol import Kind, Lesson, Verdict, close, joins_along, line_tree, n_params, raw_mistake, shape_of, unanswered

B, T, V, C = SIZES.batch_size, SIZES.block_size, SIZES.vocab_size, SIZES.n_embd


def structure_problem(s, ref_s):
    """What differs in the layers' names and shapes, as a failed Verdict, or None."""
    mine, want = dict((n, tuple(x)) for n, x in s["params"]), dict((n, tuple(x)) for n, x in ref_s["params"])
    layers = ("token_emb", "pos_emb", "ln_f", "lm_head")     # another layer may hold the same weights
    if mine == want and all(s["types"].get(a) == ref_s["types"][a] for a in layers):
        return None
    fail = lambda text, mistake: Verdict.fail(Kind.STRUCTURE, text, mistake)  # noqa: E731
    types, ref_types = s["types"], ref_s["types"]
    for attr, what in (("token_emb", f"nn.Embedding(vocab_size, n_embd), {V} x {C}"),
                       ("pos_emb", f"nn.Embedding(block_size, n_embd), {T} x {C}"),
                       ("blocks", f"the {SIZES.n_layer} Blocks in an nn.Sequential"),
                       ("ln_f", "nn.LayerNorm(n_embd)"), ("lm_head", f"nn.Linear(n_embd, vocab_size), {C} -> {V}")):
        if types.get(attr) in ("NoneType", None):
            return fail(f"GPT has no self.{attr}: add {what} under that name.", "layer_missing")
    if types["blocks"] in ("list", "tuple"):
        return fail(f"self.blocks is a plain Python {types['blocks']}, so PyTorch does not look inside "
                    f"it: parameters() finds {n_params(s)} weights to learn, not {n_params(ref_s)}, and "
                    "the blocks would never be trained. Keep them in an nn.Sequential (built from that list, "
                    "unpacked with *), which registers each Block.",
                    "plain_list")
    if s["block_types"] is not None and len(s["block_types"]) != len(ref_s["block_types"]):
        return fail(f"self.blocks holds {len(s['block_types'])} blocks; the lesson stacks n_layer = "
                    f"{SIZES.n_layer} Block()s.", "block_count")
    if s["block_types"] is not None and set(s["block_types"]) != {"Block"}:
        return fail("self.blocks should hold Block objects, the class from the set-up: Block().", "block_type")
    for attr in ("token_emb", "pos_emb", "ln_f", "lm_head"):
        if types[attr] != ref_types[attr]:
            return fail(f"self.{attr} is {types[attr]}; the lesson's is {ref_types[attr]}.", "layer_type")
    tied = [group for group in s.get("shared") or [] if len(group) > 1]
    if tied and all(name.startswith("blocks.") for group in tied for name in group):
        return fail(f"self.blocks holds one Block object {len(s['block_types'] or [])} times: multiplying a "
                    "list, [Block()] * n, repeats the object, it does not make new ones. The layers are one "
                    f"and share every weight, so PyTorch counts {n_params(s)} weights to learn, not "
                    f"{n_params(ref_s)}. Create each block separately: call Block() once per layer, in a loop "
                    "or a comprehension.", "same_block_twice")
    if tied:
        return fail(f"{' and '.join(tied[0])} are one tensor (weight tying, as GPT-2 does it): PyTorch "
                    f"counts it once, so the model has {n_params(s)} weights to learn, not {n_params(ref_s)}. "
                    "The lesson keeps the embedding and the output layer separate: remove the line that "
                    "ties them.", "weight_tying")
    missing = [n for n in want if n not in mine]
    extra = [n for n in mine if n not in want]
    if "lm_head.bias" in missing:
        return fail(f"self.lm_head has no bias (bias=False): the lesson's output layer keeps nn.Linear's "
                    f"default bias, {V} weights more.", "lm_head_no_bias")
    wrong = [f"{n} is {list(mine[n])}, not {list(want[n])}" for n in want if n in mine and mine[n] != want[n]]
    if wrong:
        return fail("layers of the wrong size: " + "; ".join(wrong[:3]) + ".", "layer_size")
    return fail("GPT's weights are stored under other names than the lesson's"
                + (f" (missing: {', '.join(missing[:4])})" if missing else "")
                + (f" (extra: {', '.join(extra[:4])})" if extra else "")
                + ": use the names the task gives, token_emb, pos_emb, blocks, ln_f, lm_head.", "other_names")


def cross_entropy_is(loss, x, y):
    """loss is F.cross_entropy(x, y) (the mean), computed here from the recorded call's input and
    target: the call's own recorded result is the learner process's word, not a computation."""
    if x.dtype != torch.float32 or y.dtype != torch.int64 or x.dim() not in (2, 3) or y.dim() not in (1, 2):
        return False
    try:
        return close(loss.reshape(()), F.cross_entropy(x, y))
    except (RuntimeError, ValueError, IndexError):
        return False


def run_problem(rec, prefix=""):
    """forward raised or gave something that is not (logits, loss): a failed Verdict, or None."""
    raised = LESSON.forward_raised(rec, prefix)
    if raised:
        return raised
    if rec.get(prefix + "out_type") not in ("tuple", "list") or rec.get(prefix + "out_len") != 2:
        return Verdict.fail(Kind.WRONG_SHAPE, (
            f"forward returned a {rec.get(prefix + 'out_type')}: return two things, (logits, loss), "
            "with loss None when no targets are given."), "not_logits_and_loss")
    if not torch.is_tensor(rec.get(prefix + "logits")):
        return Verdict.fail(Kind.WRONG_SHAPE, "forward's first result, the logits, is not a tensor.",
                            "not_logits_and_loss")
    return None


def computed(rec, ref, prefix=""):
    """The forward pass on this input computed with the fixed weights: its logits, what the
    first block got (with or without the positions), what the blocks gave or what the output
    layer got is the solution's."""
    block_in = rec.get(prefix + "block_in")
    return (any(close(rec.get(prefix + k), ref[prefix + k]) for k in ("logits", "block_in", "blocks_out", "lm_head_in"))
            or (not prefix.startswith("short") and close(block_in, ref["alone"]["tok"])))


class GPTLesson(Lesson):
    name = "gpt"
    checks = {
        "shapes": "xb / yb / logits / loss",
        "weight_count": "weights to learn",
        "positions": "the first 5 letters alone",
        "forward": "output layer gets",
        "loss": "loss before training",
        "generate": "untrained, it writes / longest context",
    }

    task_class = "GPT"
    methods = "__init__, forward and generate"
    mistakes = {
        "layer_missing": "GPT has no token_emb, pos_emb, blocks, ln_f, lm_head or generate",
        "plain_list": "the blocks are in a plain Python list, hidden from PyTorch",
        "block_count": "self.blocks holds another number of blocks than n_layer",
        "block_type": "self.blocks holds something else than Block objects",
        "layer_type": "a layer is of another type than the lesson's",
        "weight_tying": "the token embedding and the output layer share one weight (weight tying)",
        "same_block_twice": "self.blocks holds one Block object several times ([Block()] * n_layer)",
        "lm_head_no_bias": "the output layer has no bias",
        "layer_size": "a layer has another size than the lesson's",
        "other_names": "the weights are stored under other names than the task gives",
        "not_logits_and_loss": "forward does not return (logits, loss)",
        "logits_flattened": "forward returns the flattened logits",
        "logits_shape": "the logits have another shape than [B, T, vocab_size]",
        "loss_without_targets": "without targets forward does not return loss None",
        "positions_from_block_size": "the positions come from block_size, not from the window's length",
        "positions_offset": "the positions do not count 0, 1, ..., T-1",
        "no_positions": "the position embedding is never used",
        "embeddings_wrong": "the first block does not get token embedding + position embedding",
        "sees_the_future": "a position's scores depend on later positions",
        "logits_softmaxed": "forward returns probabilities (softmaxed logits), not the logits",
        "no_final_ln": "the final layer norm is never applied",
        "blocks_wrong": "the blocks' output is not every block, once, in order",
        "lm_head_input_wrong": "the output layer does not get ln_f of the blocks' output",
        "logits_changed": "the logits are changed after the output layer",
        "ce_not_flattened": "F.cross_entropy gets the logits unflattened, [B, T, vocab]",
        "targets_not_flattened": "F.cross_entropy gets the targets unflattened",
        "loss_shape": "the loss is not one number",
        "loss_not_ce": "the loss is not F.cross_entropy of the logits and the targets",
        "loss_reduction": "F.cross_entropy is called with another reduction than the mean",
        "targets_wrong": "F.cross_entropy does not get the targets",
        "context_not_cropped": "generate does not crop the context to block_size",
        "no_softmax": "generate draws from scores, not probabilities (no softmax)",
        "last_position_not_taken": "generate draws from every position's probabilities, not the last one's (logits[:, -1, :] not taken)",
        "model_not_called": "generate never calls the model",
        "appended_on_wrong_dim": "generate joins the new letters to the windows along dim 0 (torch.cat's default), not dim 1",
        "generate_returns_none": "generate returns nothing (None): no return of the extended windows",
        "generate_shape": "generate returns another shape than the windows with their new letters",
        "start_changed": "generate changes the letters it started from",
        "argmax": "generate takes the most likely letter instead of drawing",
        "generator_ignored": "generate does not draw with the generator it is given",
        "softmax_axis": "the softmax runs over another dimension than the symbols",
        "draws_wrong": "generate's letters are not drawn from the last position's probabilities",
    }

    def random_problem(self, rec, key="logits"):
        return super().random_problem(rec, key)

    anchored_checks = {"weight_count": None, "shapes": "", "loss": "train_"}

    def layers_computed(self, rec, ref):
        alone, want = rec.get("alone") or {}, ref["alone"]
        blocks = alone.get("blocks")
        return [close(alone.get(k), want[k]) for k in ("tok", "pos", "ln_f", "lm_head")] + (
            [close(a, b) for a, b in zip(blocks, want["blocks"])]
            if isinstance(blocks, list) and len(blocks) == len(want["blocks"]) else [False])

    def forward_computed(self, rec, ref, prefix):
        return computed(rec, ref, prefix)

    def _shapes(self, rec, ref):
        problem = run_problem(rec)
        if problem:
            return problem
        want = shape_of(ref["logits"])
        problem = self.logits_shape_problem(rec, ref)
        if problem:
            return problem
        if rec.get("loss_type") != "NoneType":
            return Verdict.fail(Kind.WRONG_VALUE, (
                f"without targets, forward should return loss None; yours returned a {rec.get('loss_type')}."),
                "loss_without_targets")
        return Verdict.ok(f"logits: {want}; loss None without targets")

    @staticmethod
    def logits_shape_problem(rec, ref):
        """The logits' shape differs from [B, T, vocab_size]: the failed Verdict naming that cause, or
        None. The checks that compare logits name it too: their numbers cannot be compared, and a
        wrong shape is not the future seen nor the logits changed."""
        want, got = shape_of(ref["logits"]), shape_of(rec["logits"])
        if got == want:
            return None
        if got == [want[0] * want[1], want[2]]:
            return Verdict.fail(Kind.WRONG_SHAPE, (
                f"forward returned logits of shape {got}: flatten only inside the cross_entropy "
                f"call and return the logits as {want}, one score per symbol at every position."),
                "logits_flattened")
        return Verdict.fail(Kind.WRONG_SHAPE, f"logits should be {want} (windows, positions, symbols); yours are {got}.",
                            "logits_shape")

    def _weight_count(self, rec, ref):
        s, ref_s = rec["structure"], ref["structure"]
        problem = structure_problem(s, ref_s)
        if problem:
            return problem
        return Verdict.ok(f"weights to learn: {n_params(ref_s)}")

    def _positions(self, rec, ref):
        problem = run_problem(rec)
        if problem:
            return problem
        if unanswered(rec, "short_"):
            return Verdict.fail(Kind.UNANSWERED, self.unanswered)
        problem = self.logits_shape_problem(rec, ref)
        if problem:
            return problem
        n = shape_of(ref["short_logits"])[1]
        if rec.get("short_error"):
            return Verdict.fail(Kind.FORWARD_ERROR, (
                f"forward failed on a window of {n} letters ({rec['short_error']}); generate gives the "
                f"model windows of 1 to {T} letters. Take the positions from the input: "
                f"torch.arange(T) with T = idx.shape[1], not block_size."), "positions_from_block_size")
        pos, ref_pos = rec.get("short_pos_in"), ref["short_pos_in"]
        if torch.is_tensor(pos) and not torch.equal(pos.flatten(), ref_pos.flatten()) and pos.numel() <= 64:
            return Verdict.fail(Kind.WRONG_VALUE, (
                f"for a window of {n} letters pos_emb was given positions {pos.flatten().tolist()}: the "
                f"positions must follow the sequence, {ref_pos.flatten().tolist()} (torch.arange(T))."),
                "positions_offset")
        for prefix in ("", "short_"):
            got, want = rec.get(prefix + "block_in"), ref[prefix + "block_in"]
            if not close(got, want):
                what = "the full window" if not prefix else f"a window of {n} letters"
                if rec.get(prefix + "pos_in") is None:
                    return Verdict.fail(Kind.WRONG_VALUE, (
                        f"on {what} the first block got the token embeddings alone: pos_emb is never used. "
                        "Without positions attention sees the window as a set of letters, not in order: "
                        "add self.pos_emb(torch.arange(T))."), "no_positions")
                return Verdict.fail(Kind.WRONG_VALUE, (
                    f"on {what} the first block did not get token embedding + position embedding: "
                    "add self.token_emb(idx) and self.pos_emb(torch.arange(T)) and give the sum to the blocks."),
                    "embeddings_wrong")
        if not close(rec.get("short_logits"), rec["logits"][:, :n]):
            return Verdict.fail(Kind.WRONG_VALUE, (
                f"the scores for the first {n} letters alone differ from the first {n} positions of the "
                "full window: a position should see only itself and the positions before it."), "sees_the_future")
        return Verdict.ok(f"the first {n} letters alone give the same scores as in the full window")

    def _forward(self, rec, ref):
        problem = (run_problem(rec) or structure_problem(rec["structure"], ref["structure"])
                   or self.logits_shape_problem(rec, ref))
        if problem:
            return problem
        if close(rec["logits"], ref["logits"]):
            return Verdict.ok("output layer gets the final layer norm of the last block's output; "
                              "logits checked with fixed weights")
        logits = rec["logits"]
        if logits.shape == ref["logits"].shape and close(logits, torch.softmax(ref["logits"], -1)):
            return Verdict.fail(Kind.WRONG_VALUE, (
                "forward returns probabilities, the softmax of the logits: return the logits themselves, "
                "self.lm_head(self.ln_f(x)). F.cross_entropy applies the softmax itself, and generate "
                "does it once, on the last position."), "logits_softmaxed")
        got_in, blocks_out = rec.get("lm_head_in"), rec.get("blocks_out")
        if rec.get("ln_f_calls", 0) == 0 or close(got_in, blocks_out):
            return Verdict.fail(Kind.WRONG_VALUE, (
                "the output layer gets the last block's output as it is: the final layer norm "
                "self.ln_f is never applied. Compute self.lm_head(self.ln_f(x))."), "no_final_ln")
        if not close(rec.get("block_in"), ref["block_in"]):
            if rec.get("pos_in") is None:
                return Verdict.fail(Kind.WRONG_VALUE, (
                    "the first block got the token embeddings alone: pos_emb is never used. Without "
                    "positions attention sees the window as a set of letters, not in order: add "
                    "self.pos_emb(torch.arange(T))."), "no_positions")
            return Verdict.fail(Kind.WRONG_VALUE, (
                "the first block did not get token embedding + position embedding: each letter's vector is "
                "what the letter is (self.token_emb of its id) plus where it is (self.pos_emb of its "
                "position, 0 to T - 1), added."), "embeddings_wrong")
        if not close(blocks_out, ref["blocks_out"]):
            return Verdict.fail(Kind.WRONG_VALUE, (
                f"the blocks' output is not what the {SIZES.n_layer} blocks give, one after the other, on "
                "the embeddings: run x through self.blocks (every block, once, in order)."), "blocks_wrong")
        if not close(got_in, ref["lm_head_in"]):
            return Verdict.fail(Kind.WRONG_VALUE, (
                "the output layer did not get self.ln_f of the blocks' output: "
                "logits = self.lm_head(self.ln_f(x))."), "lm_head_input_wrong")
        return Verdict.fail(Kind.WRONG_VALUE, "the logits are not self.lm_head(self.ln_f(x)): return them as they are.",
                            "logits_changed")

    def _loss(self, rec, ref):
        if unanswered(rec, "train_"):
            return Verdict.fail(Kind.UNANSWERED, self.unanswered)
        calls, ref_call = rec.get("ce_calls") or [], ref["ce_calls"][0]
        n, target = ref_call["input"].shape[0], ref_call["target"]
        for call in calls:
            x, y = call.get("input"), call.get("target")
            if torch.is_tensor(x) and x.dim() == 3 and torch.is_tensor(y) and y.dim() == 2 and x.shape[1] != V:
                return Verdict.fail(Kind.WRONG_SHAPE, (
                    f"F.cross_entropy got logits {shape_of(x)} and targets {shape_of(y)}: with three dimensions it "
                    f"reads the second one as the symbols. Flatten both: logits.view({n}, {V}) "
                    f"(B * T rows of {V} scores) and targets.view({n})."), "ce_not_flattened")
            if torch.is_tensor(x) and torch.is_tensor(y) and x.dim() == 2 and y.dim() != 1:
                return Verdict.fail(Kind.WRONG_SHAPE, (
                    f"F.cross_entropy got logits {shape_of(x)} but targets {shape_of(y)}: flatten the targets "
                    f"too, targets.view({n}), one target per row of scores."), "targets_not_flattened")
        if rec.get("train_error"):
            return Verdict.fail(Kind.FORWARD_ERROR, f"forward with targets raised {rec['train_error']}",
                                raw_mistake(rec, "train_") or "forward_error", place(rec, "train_"))
        loss, logits = rec.get("train_loss"), rec.get("train_logits")
        if not torch.is_tensor(loss) or loss.numel() != 1:
            return Verdict.fail(Kind.WRONG_SHAPE, (
                f"with targets, forward should return the loss as one number; yours is "
                f"{shape_of(loss) if torch.is_tensor(loss) else rec.get('train_loss_type')}."), "loss_shape")
        if close(logits, ref["train_logits"]):
            if close(loss.reshape(()), ref["train_loss"].reshape(())):
                return Verdict.ok("the loss is F.cross_entropy of the logits and the targets, checked with fixed weights")
            return self._loss_diagnosis(rec, calls, ref_call) or Verdict.fail(Kind.WRONG_VALUE, (
                "the loss is not F.cross_entropy of the flattened logits and the flattened targets."), "loss_not_ce")
        # the logits differ (the forward check says why): judge the loss on its own logits
        for call in calls:
            x, y = call.get("input"), call.get("target")
            if torch.is_tensor(logits) and torch.is_tensor(x) and torch.is_tensor(y) and cross_entropy_is(loss, x, y):
                if x.dim() == 2 and x.numel() == logits.numel() and close(x, logits.reshape(x.shape)) \
                        and torch.equal(y.flatten(), target.flatten()):
                    if call.get("reduction") == "mean":
                        return Verdict.ok("the loss is F.cross_entropy of your logits and the targets")
                # logits kept as [B, vocab, T], the shape cross_entropy takes unflattened (the shapes
                # check names the shape): x is then the logits themselves
                if (x.dim() == 3 and x.shape[1] == V and (close(x, logits) or close(x, logits.transpose(1, 2))) and torch.equal(y.flatten(), target.flatten())
                        and call.get("reduction") == "mean"):
                    return Verdict.ok("the loss is F.cross_entropy of your logits and the targets")
        return self._loss_diagnosis(rec, calls, ref_call) or Verdict.fail(Kind.WRONG_VALUE, (
            "the loss is not F.cross_entropy of the flattened logits and the flattened targets."), "loss_not_ce")

    def _loss_diagnosis(self, rec, calls, ref_call):
        if not calls:
            return Verdict.fail(Kind.WRONG_VALUE, (
                "the loss does not come from F.cross_entropy: compute it with F.cross_entropy on the "
                f"logits flattened to B * T rows of {V} scores and the targets flattened to B * T ids."), "loss_not_ce")
        call = calls[-1]
        if call.get("reduction") != "mean":
            return Verdict.fail(Kind.WRONG_VALUE, (
                f"F.cross_entropy was called with reduction={call.get('reduction')!r}: keep the default, "
                "the mean over all positions, so the loss does not grow with the batch."), "loss_reduction")
        if torch.is_tensor(call.get("target")) and not torch.equal(call["target"].flatten(), ref_call["target"].flatten()):
            return Verdict.fail(Kind.WRONG_VALUE, (
                "F.cross_entropy did not get the targets (the next symbol at every position): pass "
                "targets.view(B * T), in the same order as the logits' rows."), "targets_wrong")
        return None

    def _generate(self, rec, ref):
        if "gen1_lengths" not in rec:
            if not rec["structure"]["has_generate"]:
                return Verdict.fail(Kind.STRUCTURE, "GPT has no generate method.", "layer_missing")
            return Verdict.fail(Kind.NO_RESULT, "generate was not run.")
        if unanswered(rec, "gen1_"):
            return Verdict.fail(Kind.UNANSWERED, self.unanswered)
        lengths, start, new = rec["gen1_lengths"], ref["gen_start"], ref["gen1"].shape[1] - ref["gen_start"].shape[1]
        if lengths and max(lengths) > T:
            return Verdict.fail(Kind.WRONG_VALUE, (
                f"generate gave the model contexts of up to {max(lengths)} letters: the model has "
                f"position embeddings for {T} only. Crop the context to the window before each "
                f"step: idx[:, -block_size:]."), "context_not_cropped")
        if rec.get("gen1_returned") == "NoneType":
            return Verdict.fail(Kind.FORWARD_ERROR, (
                "generate returned None: a function that ends without a `return` gives None. Give back "
                "the windows with the new letters appended, at the end of generate, after the loop."),
                "generate_returns_none")
        if rec.get("gen1_error"):
            draws = rec.get("gen1_draws") or []
            if draws and draws[-1].dim() == 3:
                return Verdict.fail(Kind.FORWARD_ERROR, (
                    f"torch.multinomial got {shape_of(draws[-1])}: the probabilities of every position of "
                    "every window. The next letter follows the last position only: take its scores, "
                    "logits[:, -1, :], one row per window, before the softmax."), "last_position_not_taken")
            tree = line_tree(rec.get("gen1_error_line"))
            if rec.get("gen1_exception") == "RuntimeError" and tree is not None and 0 in joins_along(tree):
                return Verdict.fail(Kind.FORWARD_ERROR, (
                    "generate joins the new letters along dim 0, the windows' dimension (torch.cat's "
                    "default): that adds windows, and the drawn [B, 1] does not fit under [B, T]. A new "
                    "letter goes at the end of each window: join along dim=1."), "appended_on_wrong_dim")
            if draws and float(draws[-1].min()) < 0:
                return Verdict.fail(Kind.FORWARD_ERROR, (
                    "torch.multinomial got negative numbers: it draws from probabilities. Turn the last "
                    "position's scores into probabilities with F.softmax(..., dim=-1) first."), "no_softmax")
            return Verdict.fail(Kind.FORWARD_ERROR, f"generate raised {rec['gen1_error']}",
                                raw_mistake(rec, "gen1_") or "forward_error", place(rec, "gen1_"))
        if not lengths:
            return Verdict.fail(Kind.WRONG_VALUE, (
                "generate never called the model: get the scores with self(idx_cond) at every step."), "model_not_called")
        out, want = rec.get("gen1"), ref["gen1"]
        if shape_of(out) != shape_of(want):
            return Verdict.fail(Kind.WRONG_SHAPE, (
                f"generate({shape_of(start)[0]} windows of {shape_of(start)[1]}, {new} new letters) returned "
                f"{shape_of(out)}, expected {shape_of(want)}: return the windows with the new letters appended."),
                "generate_shape")
        if not torch.equal(out[:, :start.shape[1]], rec["gen_start"]):
            return Verdict.fail(Kind.WRONG_VALUE, "generate changed the letters it started from: append to idx.",
                                "start_changed")
        if torch.equal(out, want):
            return Verdict.ok(f"generate draws {new} letters with the generator, "
                              f"giving the model at most {T} letters at a time")
        table, k0 = rec["gen_table"], start.shape[1]
        argmax = all(torch.equal(out[:, k + 1], table[out[:, k]].argmax(-1)) for k in range(k0 - 1, out.shape[1] - 1))
        if argmax:
            return Verdict.fail(Kind.WRONG_VALUE, (
                "generate always takes the most likely letter (argmax), so the same start always "
                "gives the same name and most names never appear. Draw the next letter with "
                "torch.multinomial(probs, num_samples=1, generator=generator)."), "argmax")
        if not torch.equal(rec.get("gen2", out), out):
            return Verdict.fail(Kind.WRONG_VALUE, (
                "two runs with generators seeded alike gave different letters: draw with the "
                "generator you are given, torch.multinomial(..., generator=generator)."), "generator_ignored")
        draws = rec.get("gen1_draws") or []
        if draws and all(d.dim() == 2 and close(d.sum(0), torch.ones(d.shape[1:])) for d in draws):
            return Verdict.fail(Kind.WRONG_VALUE, (
                f"torch.multinomial got probabilities that add up to 1 down each column, over the "
                f"{shape_of(draws[0])[0]} windows, not along each row: the softmax ran over dim 0, the windows "
                "(which never talk to each other). Take the softmax along the symbols' dimension, the last one."),
                "softmax_axis")
        if draws and any(not close(d.sum(-1), torch.ones(d.shape[:-1])) for d in draws):
            return Verdict.fail(Kind.WRONG_VALUE, (
                "torch.multinomial got scores that are not probabilities: apply F.softmax(..., dim=-1) "
                "to the last position's logits first."), "no_softmax")
        return Verdict.fail(Kind.WRONG_VALUE, (
            "generate's letters are not drawn from the last position's probabilities: at each step "
            "take logits[:, -1, :], F.softmax over the symbols, then torch.multinomial(probs, 1, "
            "generator=generator), and append the result to idx."), "draws_wrong")


LESSON = GPTLesson()
