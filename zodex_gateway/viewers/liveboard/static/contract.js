// What the observer sends and accepts (docs/observer.md), named once for Liveboard's modules.
// Liveboard is served by the same install as the observer, so these are facts rather than
// guesses: no module here accepts other shapes. test_liveboard_contract.py checks every
// value against the Python that sends it and against docs/observer.md.

// `event_type` of a frame on /v1/events.
export const EVENT = Object.freeze({
  AGENT_FIRST_SEEN: 'agent_first_seen',
  AGENT_UPDATED: 'agent_updated',
  INVOCATION_STARTED: 'invocation_started',
  INVOCATION_COMPLETED: 'invocation_completed',
  PRESENTATION_UPDATED: 'presentation_updated',
  OUTPUT: 'output',
  OUTPUT_COMPLETE: 'output_complete',
  PROCESS_STARTED: 'process_started',
  PROCESS_ENDED: 'process_ended',
  GAP: 'gap',
});

// `kind` of a timeline record.
export const KIND = Object.freeze({
  COMMAND: 'command',
  FILE_CHANGES: 'file_changes',
  STDIN: 'stdin',
  KILL: 'kill',
  GENERIC: 'generic',
});

// `status` of a command record.
export const COMMAND_STATUS = Object.freeze({
  RUNNING: 'running',
  EXITED: 'exited',
});

// `termination_reason` of an exited command (null while it runs): only `exit` means it
// ended by itself; `lost` is a command a stopped runtime never saw end.
export const TERMINATION = Object.freeze({
  EXIT: 'exit',
  TIMEOUT: 'timeout',
  KILLED: 'killed',
  LOST: 'lost',
});

// `status` of every other record: its call's.
export const CALL_STATUS = Object.freeze({
  PENDING: 'pending',
  OK: 'ok',
  ERROR: 'error',
  INCOMPLETE: 'incomplete',
});

// `operation` of a file in a `file_changes` record.
export const OPERATION = Object.freeze({
  CREATED: 'created',
  EDITED: 'edited',
  DELETED: 'deleted',
  RENAMED: 'renamed',
});

// `by` of a record: who made the call — the model, or a person typing from Liveboard.
export const BY = Object.freeze({
  MODEL: 'model',
  PERSON: 'person',
});

// `agent_id` filter that selects the calls with no agent (their records and events carry
// `agent_id: null`); never an agent's id. Liveboard also keys their column by it.
export const NO_AGENT = 'none';

// The most records one page of /v1/timeline returns (`limit`).
export const MAX_PAGE_RECORDS = 100;

// The longest alias PUT /v1/agents/{id}/alias accepts, in characters.
export const MAX_ALIAS_CHARS = 80;
