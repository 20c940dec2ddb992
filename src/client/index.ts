/**
 * Flotilla's client library: what a script needs to start a run, steer it, read its status and
 * learn how it ended (the CLI and the demo use it too). It returns data, never text for a
 * terminal: formatting is the CLI's (src/cli/format/).
 */
export { type LoadedRequest, loadRequest, loadRequestFile } from './request-file';
export { newRunId, runMetadata, startRun } from './start';
export { type RunEnd, awaitRun } from './result';
export {
  MessageRefused,
  RunEnded,
  addSubTask,
  approve,
  cancelSubTask,
  endedAs,
  pause,
  reject,
  resume,
  retrySubTask,
} from './messages';
export { ContinueRefused, continuationOf, continueRun } from './continue';
export { loadSubTaskFile } from './sub-task-file';
export {
  NoWorkerError,
  RunNotFoundError,
  type RunReader,
  grpcCode,
  grpcReader,
  hasWorker,
  noWorkerMessage,
  queryStatus,
  readStatus,
  workerStartCommand,
} from './status';
export { httpReader } from './http-reader';
export { type ListFilters, type RunRow, SearchAttributesMissing, listRuns } from './list';
