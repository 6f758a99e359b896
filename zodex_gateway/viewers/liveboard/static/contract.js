// What the observer sends and accepts (docs/observer.md), named once for Liveboard's modules.
// Liveboard is served by the same install as the observer, so these are facts rather than
// guesses: no module here accepts other shapes. test_liveboard_contract.py checks every
// value against the Python that sends it and against docs/observer.md.

// Each name is its value in capitals, as in the Python that sends it: written once here.
function namedByValue(...values) {
  return Object.freeze(Object.fromEntries(values.map((value) => [value.toUpperCase(), value])));
}

// `event_type` of a frame on /v1/events.
export const EVENT = namedByValue(
  'agent_first_seen',
  'agent_updated',
  'invocation_started',
  'invocation_completed',
  'presentation_updated',
  'output',
  'output_complete',
  'process_started',
  'process_ended',
  'gap',
);

// `kind` of a timeline record.
export const KIND = namedByValue('command', 'file_changes', 'stdin', 'kill', 'generic');

// `status` of a command record.
export const COMMAND_STATUS = namedByValue('running', 'exited');

// `termination_reason` of an exited command (null while it runs): only `exit` means it
// ended by itself; `lost` is a command a stopped runtime never saw end.
export const TERMINATION = namedByValue('exit', 'timeout', 'killed', 'lost');

// `status` of every other record: its call's.
export const CALL_STATUS = namedByValue('pending', 'ok', 'error', 'incomplete');

// `operation` of a file in a `file_changes` record.
export const OPERATION = namedByValue('created', 'edited', 'deleted', 'renamed');

// `by` of a record: who made the call — the model, or a person typing from Liveboard.
export const BY = namedByValue('model', 'person');

// `agent_id` filter that selects the calls with no agent (their records and events carry
// `agent_id: null`); never an agent's id. Liveboard also keys their column by it.
export const NO_AGENT = 'none';

// The most records one page of /v1/timeline returns (`limit`).
export const MAX_PAGE_RECORDS = 100;

// The longest alias PUT /v1/agents/{id}/alias accepts, in characters.
export const MAX_ALIAS_CHARS = 80;
