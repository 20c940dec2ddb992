// Part of `npm run build`: bundles the compiled workflows into dist/workflow-bundle.js, which the
// worker loads instead of running webpack at every start.
const { writeFileSync } = require('node:fs');
const path = require('node:path');
const { bundleWorkflowCode } = require('@temporalio/worker');

const dist = path.join(__dirname, '..', 'dist');
bundleWorkflowCode({ workflowsPath: path.join(dist, 'workflows', 'index.js') }).then(
  ({ code }) => writeFileSync(path.join(dist, 'workflow-bundle.js'), code),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
