// The watch host's API. Every URL is relative to the page (…/<secret>/), so the
// capability in the path is kept and nothing here knows it.

const BASE = './api/v1/';

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function url(path, params = {}) {
  const u = new URL(BASE + path, document.baseURI);
  for (const [key, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== '') u.searchParams.set(key, String(value));
  }
  return u;
}

async function parse(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) throw new ApiError(response.status, body?.error || `HTTP ${response.status}`);
  return body;
}

export async function get(path, params) {
  const response = await fetch(url(path, params), {
    headers: { Accept: 'application/json' },
    cache: 'no-store',
  });
  return parse(response);
}

export const status = () => get('status');
export const agents = () => get('agents');
export const agent = (id) => get(`agents/${encodeURIComponent(id)}`);
export const timeline = (params) => get('timeline', params);

// A JSON body sent with `method`; the answer parsed as get's.
async function send(method, path, body) {
  const response = await fetch(url(path), {
    method,
    headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: JSON.stringify(body),
    cache: 'no-store',
  });
  return parse(response);
}

export const setAlias = (agentId, alias) => send('PUT', `agents/${encodeURIComponent(agentId)}/alias`, { alias });

// A person's keystrokes for a running session (observer.steer on): written to its terminal
// as they are. The reply says how many were typed and whether the terminal hid them.
export const typeInto = (handle, chars) => send('POST', `sessions/${encodeURIComponent(handle)}/input`, { chars });

// Take a session over (the model may then only watch it) or give it back.
export const takeOver = (handle, taken) => send('POST', `sessions/${encodeURIComponent(handle)}/takeover`, { taken });

// outputAgents: the agents whose output to stream (their columns are shown); none → no
// output at all. Other events come for every agent: the drawer and headers need them.
export function eventsUrl(outputAgents) {
  const params = outputAgents.length ? { output_agent_ids: outputAgents.join(',') } : { include_output: 'false' };
  return url('events', params).toString();
}
