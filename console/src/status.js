// How a pipeline's state is shown, and which actions its state allows.

import { h } from './dom.js';

/** A badge for a descriptor's deployment status. */
export function badge(p) {
  const s = p.deployment_status || 'Stopped';
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
    return [['Approve changes', 'approve'], ['Stop', 'stop']];
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
