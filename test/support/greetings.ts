/**
 * The greetings project that spine, repair and recording runs work on: sub-tasks write
 * `<id>/greeting.txt`, `check.sh` passes while every greeting there says hello, and two
 * renamers changing the same line of `shared/names.txt` conflict.
 */
import type { LeaderRequestInput } from '../../src/contracts/request';
import { makeRemote } from './remotes';
import { type SubTaskInput, shellRequest, subTask, writeAgent } from './requests';

/** Passes when every greeting file present says hello; names the first that does not. */
export const CHECK_GREETINGS = `#!/bin/bash
for f in $(ls */greeting.txt 2>/dev/null); do grep -q hello "$f" || { echo "FAIL: $f does not greet"; exit 1; }; done
echo "all greetings ok"
`;

/** shared/names.txt once both renamers' intents are in. */
export const BOTH_NAMES = 'one\nleft\nright\nthree\n';

/** The project as a remote: a README, check.sh and shared/names.txt ("one two three"). */
export function greetingsRemote() {
  return makeRemote({
    'README.md': '# sample\n',
    'check.sh': CHECK_GREETINGS,
    'shared/names.txt': 'one\ntwo\nthree\n',
  });
}

/** A request for `subTasks` on the greetings project at `url`, whose tests are check.sh. */
export function greetingsRequest(url: string, subTasks: SubTaskInput[], fields: Partial<LeaderRequestInput> = {}) {
  return shellRequest(url, subTasks, { objective: 'greetings', testCmd: './check.sh', ...fields });
}

/**
 * Greets, and renames "two" in the shared list after itself; redone on a tree where "left" is
 * there already, it runs `onRedo` instead (by default: writes both names).
 */
export function renamer(id: string, onRedo = `printf '${BOTH_NAMES.replace(/\n/g, '\\n')}' > shared/names.txt`) {
  return subTask(
    id,
    `${writeAgent(`${id}/greeting.txt`, 'hello')} && if grep -qx left shared/names.txt; then ${onRedo}; else sed -i 's/two/${id}/' shared/names.txt; fi && git commit -qam 'rename two'`,
    { prompt: `rename two to ${id}` },
  );
}
