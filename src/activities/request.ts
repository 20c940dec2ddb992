/** The request, parsed and defaulted outside the workflow. */
import { permanent } from '../contracts/failures';
import { type LeaderRequest, RequestError, parseLeaderRequest } from '../contracts/request';

export function requestActivities() {
  return {
    /**
     * Validates a run's request and fills in its defaults. Its result is in the run's history,
     * so a later release's schema (a new default, a stricter rule) cannot change a run in flight
     * when it replays.
     */
    async parseRequest(input: unknown): Promise<LeaderRequest> {
      try {
        return parseLeaderRequest(input);
      } catch (err) {
        if (err instanceof RequestError) throw permanent('InvalidRequest', err.message, { problems: err.problems });
        throw err;
      }
    },
  };
}
