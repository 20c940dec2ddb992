export { leaderWorkflow } from './leader/leader';
export { workerWorkflow } from './subtask/subtask';
export { sandboxKeeperWorkflow } from './integration/keeper';
