"""A released test cell that held hidden tests is not "changed": put its hidden tests back first.

nbgrader 0.9's generate_assignment saves each locked cell to the gradebook with the checksum of its
*source* (hidden tests included), then clears the hidden tests from the release. At autograde,
OverwriteCells compares that checksum with the submitted cell, which is the released one without
its hidden tests, and warns "Attribute 'checksum' for cell attention_weights has changed!" for
every such cell of every untouched submission. A teacher reads that as tampering.

``RestoreHiddenTests`` runs just before OverwriteCells. For each locked cell whose source in the
gradebook holds a hidden-test region, it clears that region from the source the way
ClearHiddenTests did at release (same delimiters, from the configuration); if the submitted cell is
exactly that, the cell is the release, untouched, and gets its source back (OverwriteCells would put
the same source back itself, with the warning). Any other difference is left to OverwriteCells,
which still warns and restores the cell: a changed test cell is still reported.
"""
from nbformat import NotebookNode
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor


class RestoreHiddenTests(NbGraderPreprocessor):
    """Sanitize step before OverwriteCells: a released hidden-test cell, unchanged, gets its hidden
    tests back, so nbgrader does not report a checksum change that is only the release's own."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        self._clear = ClearHiddenTests(parent=self)      # the delimiters the release was made with
        with Gradebook(info["db_url"]) as gb:
            try:        # the notebook's source cells, in one query (not one per cell)
                cells = {c.name: c for c in gb.find_notebook(info["notebook"], info["assignment"]).source_cells}
            except MissingEntry:
                cells = {}
            self._source_cell = cells.get
            for index, cell in enumerate(nb.cells):
                nb.cells[index], resources = self.preprocess_cell(cell, resources, index)
        return nb, resources

    def released(self, source_cell):
        """The source cell's text as the release has it (hidden tests cleared), or None if it has none."""
        cell = NotebookNode(cell_type=source_cell.cell_type, source=source_cell.source, metadata={})
        return cell.source if self._clear._remove_hidden_test_region(cell) else None

    def preprocess_cell(self, cell, resources, index):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is None:
            return cell, resources
        source_cell = self._source_cell(grade_id)
        if source_cell is None:
            return cell, resources            # OverwriteCells reports it
        if source_cell.locked and cell.cell_type == source_cell.cell_type \
                and self.released(source_cell) == cell.source:
            cell.source = source_cell.source
            self.log.debug("cell %s: the released cell, unchanged; its hidden tests restored", grade_id)
        return cell, resources
