/**
 * What every workflow bundle is built with (the package's, one a worker makes from the sources,
 * the tests'): the modules the SDK loads once per worker thread and shares between its workflows
 * (workflows/shared.ts). Without them every workflow evaluates each module of the bundle again
 * for itself, and zod is about half of that, in CPU and in the memory a cached workflow holds.
 */
import path from 'node:path';

/** No extension: the bundler finds `shared.js` in dist/ and `shared.ts` in the sources the tests bundle. */
export const PRELOADED_WORKFLOW_MODULES = [path.join(__dirname, '..', 'workflows', 'shared')];
