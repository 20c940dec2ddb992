export { leaderWorkflow } from './leader/leader';
export { workerWorkflow } from './subtask/subtask';
