// The tutor's hint rungs used, as data (tinygpt_course/checks/tutor.py): what the keep-hints
// plugin (index.js) keeps in a notebook's metadata. The same checks as the Python side
// (tinygpt_course/checks/hints.py: checked, merged, widget_entries, metadata_entries), which reads
// them back; tests/test_hints.py runs this file under node against it, constants and results.
// Everything here is learner-made data: bounded, plain values out, nothing rendered.

const KEPT = 'tinygpt_hints_used';   // notebook metadata key: hints.KEPT
const STATE = 'application/vnd.jupyter.widget-state+json';   // metadata.widgets' key: hints.STATE
const NAME = /^[a-z][a-z0-9_]{0,59}$/;   // a lesson, check or mistake id: hints.NAME
const MAX_ENTRIES = 100;   // entries kept at most: hints.MAX_ENTRIES

const isObject = v => typeof v === 'object' && v !== null && !Array.isArray(v);

// One entry {lesson, check, mistake, rungs} as plain checked values (snake_case ids, rungs among
// 1-3, sorted, once each), or null.
function checked(h) {
  if (!isObject(h) || !['lesson', 'check', 'mistake'].every(k => typeof h[k] === 'string' && NAME.test(h[k]))) {
    return null;
  }
  const rungs = h.rungs;
  if (!Array.isArray(rungs) || rungs.length === 0 || !rungs.every(r => Number.isInteger(r) && r >= 1 && r <= 3)) {
    return null;
  }
  return { lesson: h.lesson, check: h.check, mistake: h.mistake, rungs: [...new Set(rungs)].sort((a, b) => a - b) };
}

// Checked entries, one per (lesson, check, mistake) with the rungs of all of them, in the order
// first seen, at most MAX_ENTRIES; anything that does not check is left out.
function merged(entries) {
  const out = new Map();
  for (const found of entries) {
    const entry = checked(found);
    if (entry === null) {
      continue;
    }
    const key = `${entry.lesson} ${entry.check} ${entry.mistake}`;   // ids hold no space
    if (out.has(key)) {
      const both = out.get(key);
      both.rungs = [...new Set([...both.rungs, ...entry.rungs])].sort((a, b) => a - b);
    } else if (out.size < MAX_ENTRIES) {
      out.set(key, entry);
    }
  }
  return [...out.values()];
}

// The tutor's entries in a notebook's widget state (metadata.widgets), as found (unchecked): each
// hint box's `tinygpt_hints` and each of the tutor's ledger's `tinygpt_hints_used`.
function widgetEntries(widgets) {
  const state = isObject(widgets) && isObject(widgets[STATE]) ? widgets[STATE].state : null;
  if (!isObject(state)) {
    return [];
  }
  const found = [];
  for (const model of Object.values(state).slice(0, 10 * MAX_ENTRIES)) {
    const s = isObject(model) ? model.state : null;
    if (!isObject(s)) {
      continue;
    }
    if (Object.prototype.hasOwnProperty.call(s, 'tinygpt_hints')) {
      found.push(s.tinygpt_hints);
    }
    if (Array.isArray(s.tinygpt_hints_used)) {
      found.push(...s.tinygpt_hints_used.slice(0, MAX_ENTRIES));
    }
  }
  return found;
}

// What metadata[KEPT] becomes when metadata.widgets changes from `before` to `after`: the entries
// it holds, then those of both widget states, checked and merged. Nothing is ever dropped (but
// what does not check, or goes beyond MAX_ENTRIES).
function kept(held, before, after) {
  const previous = Array.isArray(held) ? held.slice(0, MAX_ENTRIES) : [];
  return merged([...previous, ...widgetEntries(before), ...widgetEntries(after)]);
}

module.exports = { KEPT, STATE, NAME, MAX_ENTRIES, checked, merged, widgetEntries, kept };
