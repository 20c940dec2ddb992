// Part of `npm run build`: bundles the compiled workflows into dist/workflow-bundle.js, which the
// worker loads instead of running webpack at every start, and dist/workflow-bundle-traced.js, the
// same code with OpenTelemetry's workflow interceptors, which a worker with tracing on loads.
const { writeFileSync } = require('node:fs');
const path = require('node:path');
const { bundleWorkflowCode } = require('@temporalio/worker');

const dist = path.join(__dirname, '..', 'dist');
const { TRACED_WORKFLOW_MODULES } = require(path.join(dist, 'temporal', 'telemetry.js'));
const { PRELOADED_WORKFLOW_MODULES } = require(path.join(dist, 'temporal', 'workflow-bundle.js'));
const bundles = [
  ['workflow-bundle.js', {}],
  ['workflow-bundle-traced.js', { workflowInterceptorModules: TRACED_WORKFLOW_MODULES }],
];
(async () => {
  for (const [file, options] of bundles) {
    const { code } = await bundleWorkflowCode({
      workflowsPath: path.join(dist, 'workflows', 'index.js'),
      preloadModules: PRELOADED_WORKFLOW_MODULES,
      ...options,
    });
    writeFileSync(path.join(dist, file), code);
  }
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
