/**
 * Modules every workflow of a worker thread shares instead of evaluating its own copy: the
 * workflow bundle preloads this one (temporal/workflow-bundle.ts), and the Temporal SDK then gives each
 * workflow the copy it already holds, frozen. Only stateless libraries belong here.
 */
import { z } from 'zod';

// zod sets its defaults (the locale of its messages, its memoizer) when it builds its first
// schema: one is built here, before the SDK freezes zod, so that no workflow has to set them.
z.object({ warm: z.string() }).safeParse({ warm: '' });

export { z };
