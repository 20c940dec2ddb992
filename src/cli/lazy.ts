/**
 * Modules loaded on first use, so that `--help` loads none of them, `validate` only zod and
 * yaml, and only the commands that talk to Temporal load its client, the slowest of all.
 * (Plain requires: both the compiled CommonJS and tsx in a checkout resolve them.)
 */
export const load = {
  requestFile: () => require('../client/request-file') as typeof import('../client/request-file'),
  request: () => require('../contracts/request') as typeof import('../contracts/request'),
  yaml: () => require('yaml') as typeof import('yaml'),
  temporalSdk: () => require('@temporalio/client') as typeof import('@temporalio/client'),
  connection: () => require('../temporal/connection') as typeof import('../temporal/connection'),
  temporalServer: () => require('../temporal/server') as typeof import('../temporal/server'),
  start: () => require('../client/start') as typeof import('../client/start'),
  result: () => require('../client/result') as typeof import('../client/result'),
  messages: () => require('../client/messages') as typeof import('../client/messages'),
  subTaskFile: () => require('../client/sub-task-file') as typeof import('../client/sub-task-file'),
  continuation: () => require('../client/continue') as typeof import('../client/continue'),
  status: () => require('../client/status') as typeof import('../client/status'),
  httpReader: () => require('../client/http-reader') as typeof import('../client/http-reader'),
  runs: () => require('../client/list') as typeof import('../client/list'),
  listFilters: () => require('./list-filters') as typeof import('./list-filters'),
  searchAttributes: () => require('../temporal/search-attributes') as typeof import('../temporal/search-attributes'),
  statusFormat: () => require('./format/status') as typeof import('./format/status'),
  runEndFormat: () => require('./format/run-end') as typeof import('./format/run-end'),
  runsFormat: () => require('./format/runs') as typeof import('./format/runs'),
  live: () => require('./live') as typeof import('./live'),
  schema: () => require('./schema') as typeof import('./schema'),
  init: () => require('./init') as typeof import('./init'),
  worker: () => require('../worker') as typeof import('../worker'),
  gc: () => require('../retention/gc') as typeof import('../retention/gc'),
  stagingDir: () => require('../git/staging-dir') as typeof import('../git/staging-dir'),
};
