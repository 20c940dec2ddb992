// Lint rules that catch what review misses: promises nobody awaits, and workflow code that reaches
// for the world. Style is Prettier's job (npm run format), not ESLint's.
import js from '@eslint/js';
import { builtinModules } from 'node:module';
import globals from 'globals';
import tseslint from 'typescript-eslint';

/** Node's built-in modules under both spellings: `fs` and `node:fs`. */
const nodeBuiltins = builtinModules.flatMap((m) => [m, `node:${m}`]);

/**
 * Workflow code runs in Temporal's deterministic sandbox and must be replayable: no I/O, no clock,
 * no randomness. contracts/ is imported by workflows, so it is held to the same rule. Activities
 * are reached through proxyActivities, by type only.
 */
const deterministic = {
  paths: nodeBuiltins.map((name) => ({ name, message: 'workflow code and contracts/ must not use Node APIs' })),
  patterns: [
    {
      group: [
        '@temporalio/activity',
        '@temporalio/client',
        '@temporalio/worker',
        '@temporalio/testing',
        'simple-git',
        'e2b',
        'pino',
        'pino-*',
        'yaml',
        'commander',
        '@opentelemetry/*',
      ],
      message: 'workflow code and contracts/ import only @temporalio/workflow, @temporalio/common and zod',
    },
    {
      group: [
        '**/activities',
        '**/activities/*',
        '**/git/*',
        '**/sandbox/**',
        '**/store/*',
        '**/agents',
        '**/agents/*',
        '**/temporal/*',
        '**/config/*',
        '**/client',
        '**/client/*',
        '**/cli/*',
        '**/log/*',
        '**/retention/*',
        '**/worker',
      ],
      allowTypeImports: true,
      message: 'workflow code and contracts/ import only types from outside workflows/ and contracts/',
    },
  ],
};

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'test/history/**', 'schema/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': [
        'error',
        { checksVoidReturn: { arguments: false, attributes: false } },
      ],
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
      // Lazy requires keep the CLI's start fast (cli/index.ts) and the E2B SDK unloaded until needed.
      '@typescript-eslint/no-require-imports': 'off',
      // Flotilla refuses and strips control characters on purpose, in many places.
      'no-control-regex': 'off',
      // A closure may name a variable before the one assignment that gives it its value.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  {
    files: ['src/workflows/**/*.ts', 'src/contracts/**/*.ts'],
    rules: {
      'no-restricted-imports': 'off',
      '@typescript-eslint/no-restricted-imports': ['error', deterministic],
      'no-restricted-globals': [
        'error',
        { name: 'process', message: 'workflow code and contracts/ must not read the process environment' },
        { name: 'setTimeout', message: 'use sleep() from @temporalio/workflow' },
        { name: 'setInterval', message: 'use sleep() from @temporalio/workflow in a loop' },
      ],
    },
  },
  {
    files: ['**/*.js', '**/*.mjs', '**/*.cjs', '**/*.mts'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: {
      ...tseslint.configs.disableTypeChecked.languageOptions,
      globals: globals.node,
    },
  },
  {
    // The agents' event parsers read untrusted JSON field by field through str() and num(),
    // which check every type; typing each event shape would only restate those checks.
    files: ['src/agents/claude-code.ts', 'src/agents/codex.ts', 'src/agents/lines.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // Tests poke at untyped JSON (model server bodies, histories) on purpose.
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
);
