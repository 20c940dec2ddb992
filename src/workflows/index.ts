export { leaderWorkflow } from './leader';
export { workerWorkflow } from './worker';
