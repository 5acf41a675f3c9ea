// The course's JupyterLab extension (tinygpt-course), two plugins.
const { KEPT, kept } = require('./hints');

// nbgrader's Assignment List: "(view feedback)" runs filebrowser:go-to-path on the feedback folder
// and stops there. After it, open the feedback HTML in that folder (JupyterLab's HTML viewer).
const FEEDBACK = /(^|\/)feedback\/[^/]+$/;

const openFeedback = {
  id: 'tinygpt-feedback:open-feedback',
  autoStart: true,
  activate: app => {
    app.commands.commandExecuted.connect(async (_, args) => {
      const path = args.args && args.args.path;
      if (args.id !== 'filebrowser:go-to-path' || typeof path !== 'string' || !FEEDBACK.test(path)) {
        return;
      }
      const folder = await app.serviceManager.contents.get(path, { content: true });
      for (const item of folder.content || []) {
        if (item.type === 'file' && item.name.endsWith('.html')) {
          await app.commands.execute('docmanager:open', { path: item.path, factory: 'HTML Viewer' });
        }
      }
    });
  }
};

// The tutor's hint rungs used (tinygpt_course/checks/tutor.py) live in widget state, which
// jupyterlab-manager writes into metadata.widgets when a save starts: after Kernel > Restart that
// state is empty, and a save before any cell runs would lose them. So whenever metadata.widgets
// changes, keep the tutor's entries of the old and the new state in metadata.tinygpt_hints_used,
// together with those it holds (hints.js: checked, merged, never dropped). The change is signalled
// synchronously inside jupyterlab-manager's setMetadata, so this runs before the save serializes
// the notebook, whichever plugin connected to the save first. The tutor reads the key back.
const keepHints = {
  id: 'tinygpt-feedback:keep-hints',
  autoStart: true,
  activate: app => {
    const watched = new WeakSet();     // a model opened in two views is watched once
    app.docRegistry.addWidgetExtension('Notebook', {
      createNew: (panel, context) => {
        const model = context.model;
        if (watched.has(model) || !model.metadataChanged || !model.setMetadata) {
          return;
        }
        watched.add(model);
        model.metadataChanged.connect((_, change) => {
          if (change.key !== 'widgets') {
            return;
          }
          const held = model.getMetadata(KEPT);
          const keep = kept(held, change.oldValue, change.newValue);
          if (keep.length && JSON.stringify(keep) !== JSON.stringify(held)) {
            model.setMetadata(KEPT, keep);
          }
        });
      }
    });
  }
};

module.exports = [openFeedback, keepHints];
