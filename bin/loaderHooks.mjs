// Module hooks (node:module register, from bin/loader.mjs) that run algohost's TypeScript
// sources as they are: each `.ts` file is stripped of its types by esbuild (no bundling, no
// type check: `npm run typecheck` does that) when first imported.
//
// Why not tsx's loader, as the tests and scripts use: tsx has esbuild keep every function's name
// (`keepNames`), which wraps each function and closure made at run time in a call that defines
// its `name` property, ~0.2–1 µs a closure; on a warm call's path that was most of the call
// limiter's cost (2.6 µs of its 3; docs/performance.md). Nothing here renames anything, so the
// names are the source's without it.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { transform } from 'esbuild';

/** What tsconfig.json says that changes emitted code (a transform reads no tsconfig file by itself). */
const TSCONFIG = { compilerOptions: { target: 'ES2022', useDefineForClassFields: true, verbatimModuleSyntax: true } };

export async function load(url, context, nextLoad) {
  if (!url.startsWith('file:') || !url.endsWith('.ts')) return nextLoad(url, context);
  const file = fileURLToPath(url);
  const { code } = await transform(await readFile(file, 'utf8'), {
    loader: 'ts',
    format: 'esm',
    target: `node${process.versions.node}`,
    tsconfigRaw: TSCONFIG,
    // Stack traces name the .ts file and line (bin/loader.mjs turns source maps on).
    sourcemap: 'inline',
    sourcesContent: false,
    sourcefile: file,
  });
  return { format: 'module', source: code, shortCircuit: true };
}
