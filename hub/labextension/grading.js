// The grading service's answer (tinygpt_course/service/web.py, GET <hub>/services/grading/api/mine)
// as lines of plain text for the Grading panel (index.js). Everything in the answer is data: each
// value is checked and bounded here, and the panel shows the lines as text, never as markup.
// tests/test_service_web.py runs these functions under node against the service's answers.

const MAX_TEXT = 100;        // characters of one name shown
const MAX_CHECKS = 50;       // checks listed per assignment at most
const WAITING = new Set(['queued', 'held', 'grading']);

const isObject = v => typeof v === 'object' && v !== null && !Array.isArray(v);
const text = v => String(v).replace(/[\u0000-\u001f\u007f]/g, '?').slice(0, MAX_TEXT);
const num = v => (typeof v === 'number' && isFinite(v) ? String(Math.round(v * 100) / 100) : '?');
const pair = v => (Array.isArray(v) && v.length === 2 ? `${num(v[0])}/${num(v[1])}` : '?/?');
// when a held submission may be graded: its time, and its date too unless it is today (a day's
// limit holds until tomorrow: "from 09:12" alone would say this morning)
const time = s => {
  if (typeof s !== 'number' || !isFinite(s)) {
    return 'later';
  }
  const when = new Date(s * 1000);
  return when.toDateString() === new Date().toDateString() ? when.toLocaleTimeString() : when.toLocaleString();
};

// The service's URL on this hub: <hub base>services/grading/, from JupyterLab's hubPrefix
// ("/hub/", "/base/hub/"); null outside a hub (course.sh lab: no service).
function serviceUrl(hubPrefix) {
  if (typeof hubPrefix !== 'string' || !/\/hub\/?$/.test(hubPrefix)) {
    return null;
  }
  return hubPrefix.replace(/hub\/?$/, '') + 'services/grading/';
}

// The assignments of an api/mine answer, {name: view}, or {} when it is not one.
function assignments(mine) {
  return isObject(mine) && isObject(mine.assignments) ? mine.assignments : {};
}

// Whether any submission still waits or is being graded (then the panel asks again soon).
function pending(mine) {
  return Object.values(assignments(mine)).some(v => isObject(v) && WAITING.has(v.state));
}

// One assignment's view -> lines: the first says where it is, the next its score per check.
function lines(name, view) {
  const head = `${text(name)}: `;
  if (!isObject(view)) {
    return [head + 'unknown'];
  }
  switch (view.state) {
    case 'received':        // an exam's: only that it arrived
      return [head + 'received'];
    case 'queued':
      return [head + (Number.isInteger(view.place) ? `queued, place ${view.place}` :
        'queued, after your previous submission')];
    case 'held':
      return [head + `waiting (at most so many gradings a minute and a day): graded from ${time(view.not_before)}`];
    case 'refused':
      return [head + `not graded (over the limit of gradings): submit again after ${time(view.not_before)}`];
    case 'grading':
      return [head + 'being graded'];
    case 'flagged':
      return [head + 'could not be graded automatically: your teacher will look at it'];
    case 'superseded':
      return [head + 'replaced by a newer submission'];
    case 'graded': {
      const out = [head + `graded: ${pair(view.total)}` +
        (view.feedback === true ? ' (feedback: Assignment List, fetch feedback)' : '')];
      const scores = isObject(view.scores) ? Object.entries(view.scores).slice(0, MAX_CHECKS) : [];
      for (const [check, score] of scores) {
        out.push(`  ${text(check)}: ${pair(score)}`);
      }
      return out;
    }
    default:
      return [head + 'unknown'];
  }
}

module.exports = { MAX_TEXT, MAX_CHECKS, serviceUrl, assignments, pending, lines };
