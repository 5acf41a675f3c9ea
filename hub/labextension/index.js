// The course's JupyterLab extension (tinygpt-course), three plugins.
const { Notification } = require('@jupyterlab/apputils');
const { PageConfig } = require('@jupyterlab/coreutils');
const { Widget } = require('@lumino/widgets');
const { KEPT, kept } = require('./hints');
const grading = require('./grading');

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

// Grading on submit (hub/README.md): after Submit in nbgrader's Assignment List, the grading
// service's word on the submission -- queued and its place, being graded, then the score per check
// (an exam's: "received" only) -- in a Grading panel on the right, and a notification when it is
// graded. No reload, no command: the panel asks the service (api/mine: this user's own, the hub's
// OAuth says who) every few seconds while something waits. The first request carries no service
// cookie: the service redirects it to the hub's OAuth, which (the user logged in, the service
// registered with oauth_no_confirm) redirects back with a code to the service, which sets its
// cookie and redirects to api/mine: a frame's navigation follows all of it, same origin. Every
// value shown is set as textContent (grading.js checks and bounds them).
const POLL_MS = 3000;
const AFTER_SUBMIT_MS = 120000;     // how long a Submit waits for its submission to be queued
const MAX_MISSES = 20;              // answers missed in a row before the panel stops asking

const gradingStatus = {
  id: 'tinygpt-feedback:grading-status',
  autoStart: true,
  activate: app => {
    const url = grading.serviceUrl(PageConfig.getOption('hubPrefix'));
    if (url === null) {
      return;                       // not on a hub: no grading service
    }
    let panel = null;
    let timer = null;
    let before = null;              // the answer when Submit was pressed
    let submittedAt = 0;
    let last = {};
    let misses = 0;

    const show = (mine, note) => {
      if (panel === null) {
        panel = new Widget();
        panel.id = 'tinygpt-grading-status';
        panel.title.label = 'Grading';
        panel.title.caption = 'Your submissions, as the grading service has them';
        panel.node.style.padding = '8px';
        panel.node.style.overflowY = 'auto';
        app.shell.add(panel, 'right', { rank: 900 });
      }
      const rows = Object.entries(grading.assignments(mine)).map(([name, view]) => grading.lines(name, view));
      if (note) {
        rows.unshift([note]);
      }
      const box = document.createElement('div');
      for (const row of rows.length ? rows : [['nothing submitted yet']]) {
        const item = document.createElement('pre');
        item.style.whiteSpace = 'pre-wrap';
        item.style.margin = '0 0 8px 0';
        item.textContent = row.join('\n');
        box.appendChild(item);
      }
      panel.node.replaceChildren(box);
      app.shell.activateById(panel.id);
    };

    const tell = mine => {          // a notification for each assignment that just finished
      for (const [name, view] of Object.entries(grading.assignments(mine))) {
        const was = last[name];
        const finished = view && ['graded', 'received', 'flagged'].includes(view.state);
        if (finished && (!was || was.state !== view.state || was.submitted !== view.submitted)) {
          Notification.info(grading.lines(name, view)[0].slice(0, 120), { autoClose: 10000 });
        }
      }
      last = grading.assignments(mine);
    };

    // api/mine, read through a hidden iframe: a navigation carries the service's cookie without
    // the X-XSRFToken header JupyterHub (4.1+) asks of a cookie-authenticated fetch(), and follows
    // the OAuth redirects the first time. The JSON is read from the frame (same origin) as text.
    const ask = () => new Promise(resolve => {
      const frame = document.createElement('iframe');
      frame.style.display = 'none';
      frame.setAttribute('aria-hidden', 'true');
      let timeout = null;
      const done = value => {
        clearTimeout(timeout);
        frame.remove();
        resolve(value);
      };
      timeout = setTimeout(() => done(null), 30000);
      frame.onload = () => {
        try {
          const doc = frame.contentDocument;
          const answered = doc && doc.location.pathname.endsWith('/api/mine') &&
            (doc.contentType || '').startsWith('application/json');
          const pre = answered ? doc.querySelector('pre') || doc.body : null;
          done(pre ? JSON.parse(pre.textContent) : null);   // elsewhere (the hub's login): nothing
        } catch (e) {
          done(null);
        }
      };
      frame.src = url + 'api/mine';
      document.body.appendChild(frame);
    });

    const newSubmission = mine => Object.entries(grading.assignments(mine)).some(([name, view]) => {
      const was = before === null ? undefined : grading.assignments(before)[name];
      return !was || was.submitted !== view.submitted;
    });

    const poll = async () => {
      timer = null;
      const mine = await ask();
      if (mine === null) {          // no answer (the service restarting?): ask again a few times
        if (misses++ < MAX_MISSES && (before !== null || grading.pending({ assignments: last }))) {
          timer = setTimeout(poll, POLL_MS);
        }
        return;
      }
      misses = 0;
      const waitingForSubmit = before !== null && !newSubmission(mine) && Date.now() - submittedAt < AFTER_SUBMIT_MS;
      const wasPending = grading.pending({ assignments: last });     // it just finished: show that too
      if (before !== null || wasPending || grading.pending(mine)) {
        show(mine, waitingForSubmit ? 'Submitted: waiting for the grading service to queue it' : null);
        tell(mine);
      } else {
        last = grading.assignments(mine);
      }
      if (before !== null && newSubmission(mine)) {
        before = null;              // the Submit's submission is in the queue: follow it like any
      }
      if (waitingForSubmit || grading.pending(mine)) {
        timer = setTimeout(poll, POLL_MS);
      }
    };

    // nbgrader's Assignment List: a "Submit" button of a downloaded assignment
    document.addEventListener('click', event => {
      const button = event.target instanceof Element ? event.target.closest('button') : null;
      if (!button || button.textContent.trim() !== 'Submit' || !button.closest('#fetched_assignments_list')) {
        return;
      }
      submittedAt = Date.now();
      before = { assignments: last };     // as last seen: the new submission is what differs
      if (timer === null) {
        timer = setTimeout(poll, POLL_MS);
      }
    }, true);

    app.restored.then(poll);        // a submission still waiting from before the page was opened
  }
};

module.exports = [openFeedback, keepHints, gradingStatus];
