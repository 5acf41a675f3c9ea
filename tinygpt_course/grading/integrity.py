"""Tampering the teacher can see: what a submission changed in the cells it may not change,
measured before grading puts them back, and kept as data in the autograded notebook.

nbgrader restores a locked cell that a learner edited and a test cell that a learner deleted
(OverwriteCells, and RestoreDeletedCells here), and says so only in its log. Two small steps of
the sanitize pipeline keep it instead, in the notebook's metadata under ``KEY`` (a list of
``{"kind", "cell"}``; whatever the learner's notebook said there is dropped first):

- ``NoteDeletedCells``, before RestoreDeletedCells: each graded or answer cell of the lesson's
  source that the submission no longer has (``cell_deleted``);
- ``NoteChangedCells``, after RestoreHiddenTests (a released test cell, unchanged, has its hidden
  tests back by then) and before OverwriteCells: each locked cell whose checksum is not the
  source's (``cell_changed``).

``integrity(nb)`` reads the list back; ``CommentIntegrity``, after the scores are saved, puts each
note in the gradebook comment of the cell it names, or of the answer cell for a cell nbgrader keeps
no comment for (plain text); ``tinygpt-grade-class`` ends with one
line per learner that has any, and the class report shows the same.
"""
from nbgrader.preprocessors import NbGraderPreprocessor

KEY = "tinygpt_integrity"
KINDS = {"cell_deleted": "a graded or answer cell deleted (put back from source)",
         "cell_changed": "a read-only cell edited (put back from source)"}


def _source_cells(resources):
    """{cell name: (checksum, locked, graded or answer)} of the lesson's source notebook; {} for a
    notebook the gradebook does not know (nbgrader's own steps say so)."""
    from nbgrader.api import Gradebook, MissingEntry
    info = resources["nbgrader"]
    with Gradebook(info["db_url"]) as gb:
        try:
            source = gb.find_notebook(info["notebook"], info["assignment"])
        except MissingEntry:
            return {}
        graded = {c.name for c in source.grade_cells} | {c.name for c in source.solution_cells}
        return {c.name: (c.checksum, c.locked, c.name in graded) for c in source.source_cells}


def _note(nb, kind, cell):
    nb.metadata.setdefault(KEY, []).append({"kind": kind, "cell": cell})


class NoteDeletedCells(NbGraderPreprocessor):
    """Before RestoreDeletedCells: the graded and answer cells the submission no longer has."""

    def preprocess(self, nb, resources):
        nb.metadata.pop(KEY, None)                 # whatever the learner's notebook said
        present = {c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells}
        for name, (_, _, graded) in _source_cells(resources).items():
            if graded and name not in present:
                _note(nb, "cell_deleted", name)
        return nb, resources


class NoteChangedCells(NbGraderPreprocessor):
    """After RestoreHiddenTests, before OverwriteCells: the locked cells whose source is not the
    course's (nbgrader's own checksum)."""

    def preprocess(self, nb, resources):
        from nbgrader.utils import compute_checksum
        source = _source_cells(resources)
        deleted = {n["cell"] for n in nb.metadata.get(KEY, [])}
        for cell in nb.cells:
            name = cell.metadata.get("nbgrader", {}).get("grade_id")
            if name in source and name not in deleted and source[name][1] and source[name][0] \
                    and compute_checksum(cell) != source[name][0]:
                _note(nb, "cell_changed", name)
        return nb, resources


class CommentIntegrity(NbGraderPreprocessor):
    """After SaveAutoGrades: what grading put back, in the gradebook comment of the cell it
    affected, as plain text (nbgrader renders comments as markdown: this holds no markup, only
    cells' ids). nbgrader keeps a comment for answer and task cells alone: a note on one of those
    goes on its own comment; a note on a test or read-only cell (which has a score, or nothing,
    but no comment) goes on the lesson's answer cell, where RecordFlags writes too, naming it."""

    def preprocess(self, nb, resources):
        notes = integrity(nb)
        if not notes:
            return nb, resources
        from nbgrader.api import Gradebook
        from nbgrader.utils import is_solution, is_task
        commented = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if is_solution(c) or is_task(c)]
        answer = next((c.metadata["nbgrader"]["grade_id"] for c in nb.cells
                       if is_solution(c) and c.cell_type == "code"), None)
        by_cell = {}
        for kind, cell in notes:
            target = cell if cell in commented else answer
            if target is not None:
                by_cell.setdefault(target, []).append(f"{KINDS[kind]}: {cell}")
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            for target, found in by_cell.items():
                text = "INTEGRITY: " + "; ".join(found) + ". Grading used the course's own cells."
                comment = gb.find_comment(target, info["notebook"], info["assignment"], info["student"])
                comment.auto_comment = f"{comment.auto_comment}\n\n{text}" if comment.auto_comment else text
            gb.db.commit()
        return nb, resources


def integrity(nb):
    """[(kind, cell)] an autograded notebook's sanitize steps noted, in a fixed vocabulary (any
    entry off it is dropped: the list is data, read back as such)."""
    notes = nb.get("metadata", {}).get(KEY)
    if not isinstance(notes, list):
        return []
    return [(n["kind"], str(n["cell"])[:80]) for n in notes[:50]
            if isinstance(n, dict) and n.get("kind") in KINDS and isinstance(n.get("cell"), str)]


def signals(nb):
    """What an autograded notebook shows of tampering, as short lines: the cells put back, the
    checks the independent re-run did not confirm, a notebook that was not valid JSON."""
    from .verdicts import read_verdicts
    found = [f"{kind.replace('_', ' ')}: {cell}" for kind, cell in integrity(nb)]
    kept = read_verdicts(nb) or {}
    found += [f"re-run flagged: {check}" for check in kept.get("flagged") or [] if isinstance(check, str)]
    if kept.get("broken") is True:
        found.append("not valid JSON: the release graded in its place")
    return found
