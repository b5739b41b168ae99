// How a pipeline's state is shown, and which actions its state allows.

import { h } from './dom.js';

/** A badge for a descriptor's deployment status. */
export function badge(p) {
  const s = p.deployment_status || 'Stopped';
  if (p.deployment_runtime_status === 'AwaitingApproval') {
    return h('span.badge.awaiting', { 'data-status': 'AwaitingApproval' }, 'Awaiting approval');
  }
  const desired = p.deployment_desired_status;
  const text = desired && desired !== s && s !== 'Stopped' ? `${s} → ${desired}` : s;
  if (p.program_status === 'SqlError') {
    return h('span.badge.failed', { 'data-status': s }, `${text} (program error)`);
  }
  const kind = p.deployment_error ? 'failed' : s.toLowerCase();
  return h(`span.badge.${kind}`, { 'data-status': s }, p.deployment_error ? `${text} (error)` : text);
}

/** The actions a pipeline in this state accepts: [label, endpoint]. */
export function actions(p) {
  if (p.deployment_runtime_status === 'AwaitingApproval') {
    // Stopping a pipeline that waits for approval cancels its start.
    return [['Approve changes', 'approve'], ['Cancel start', 'stop']];
  }
  switch (p.deployment_status) {
    // Replaying: running, its journal's changes still being stepped.
    case 'Running': case 'Replaying': return [['Pause', 'pause'], ['Stop', 'stop']];
    case 'Paused': return [['Resume', 'resume'], ['Stop', 'stop']];
    case 'Stopping': return [];
    default:
      // A program that does not check cannot start: fix it in the SQL tab.
      return p.program_status === 'SqlError' ? [['Clear', 'clear']] : [['Start', 'start'], ['Clear', 'clear']];
  }
}

/** What a start that awaits approval would change, from
 * `deployment_runtime_status_details` (`{tables, views}`, each with
 * `added`, `modified`, `removed` and `unchanged` names): one line per
 * kind of change, and what is kept. */
export function changes(details) {
  const lines = [];
  const names = (list) => (list || []).join(', ');
  for (const [kind, what] of [['views', 'Views'], ['tables', 'Tables']]) {
    const d = (details && details[kind]) || {};
    if ((d.added || []).length) lines.push([`${kind}-added`, `${what} added: ${names(d.added)}`]);
    if ((d.modified || []).length) {
      const how = kind === 'views' ? 'recomputed from what they read' : 'start empty';
      lines.push([`${kind}-modified`, `${what} changed (${how}): ${names(d.modified)}`]);
    }
    if ((d.removed || []).length) lines.push([`${kind}-removed`, `${what} removed (their state is dropped): ${names(d.removed)}`]);
  }
  const kept = ['tables', 'views'].map((k) => ((details && details[k] && details[k].unchanged) || []).length);
  lines.push(['kept', `Unchanged, their state kept: ${kept[0]} table${kept[0] === 1 ? '' : 's'}, ${kept[1]} view${kept[1] === 1 ? '' : 's'}`]);
  return lines;
}

/** The question asked before an action that loses data, or null. */
export function confirmation(name, what) {
  if (what === 'clear') {
    return `Clear pipeline ${name}? Its state, checkpoints and journal are deleted `
      + '(the program and its connectors are kept); its next start begins from empty tables.';
  }
  return null;
}
