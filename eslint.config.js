import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

export default tseslint.config(
  { ignores: ['node_modules/', '.algohost/', 'bench/.work/', 'dist/', 'client/dist/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-restricted-properties': ['error', {
        object: 'process', property: 'env',
        message: 'Only src/config.ts reads the environment; hand settings in.',
      }],
    },
  },
  {
    // The web console runs in browsers.
    files: ['console/**'],
    languageOptions: { globals: { ...globals.browser } },
  },
  {
    // client/src/env.ts is the client package's one reader of the environment; the git hook is
    // a program of its own, run by git, whose one input besides stdin is the environment.
    files: ['src/config.ts', 'client/src/env.ts', 'src/algorithms/gitHook.mjs', 'test/**', 'bench/**', 'bin/**'],
    rules: { 'no-restricted-properties': 'off' },
  },
);
