// nbgrader's Assignment List: "(view feedback)" runs filebrowser:go-to-path on the feedback folder
// and stops there. After it, open the feedback HTML in that folder (JupyterLab's HTML viewer).
const FEEDBACK = /(^|\/)feedback\/[^/]+$/;

module.exports = [{
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
}];
