/**
 * The code's layers (docs/architecture.md): every module of src/ imports only modules of its own
 * layer or of layers below it, and no module imports itself back through others (no cycles),
 * type-only and dynamic imports included. Read from the source files themselves, so an upward
 * import or a cycle added anywhere fails here, naming it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '..');

/**
 * Bottom to top. A module's layer is the first whose pattern matches its path (from the
 * repository's root); patterns are a path, or a directory ending in `/`.
 */
const LAYERS: [string, string[]][] = [
  ['foundations (import nothing of algohost but each other)', ['src/errors.ts', 'src/wellFormed.ts', 'src/addresses.ts', 'src/addressRule.ts', 'src/fairQueue.ts', 'src/concurrency.ts', 'src/metrics.ts', 'src/config.ts', 'client/src/', 'src/http/answers.ts', 'src/home.ts', 'src/tracing.ts', 'src/tracingTypes.ts', 'src/tracingExport.ts', 'src/tracingThread.mjs']],
  ['the metadata store', ['src/store/']],
  ['the server secret', ['src/secret.ts']],
  ['limits and quotas', ['src/limits/']],
  ['auth', ['src/auth/']],
  ['the events outbox (what the domain writes its events with)', ['src/events/outbox.ts', 'src/events/filter.ts']],
  ['the runtime', ['src/runtime/']],
  ['data: blob stores, connectors, connected accounts', ['src/data/']],
  ['algorithms', ['src/algorithms/']],
  ['events\' readers (feed, webhooks, triggers)', ['src/events/']],
  ['the cluster', ['src/cluster/']],
  ['HTTP and the console', ['src/http/', 'src/console/']],
  ['the services and the app', ['src/services.ts', 'src/health.ts', 'src/app.ts', 'src/move.ts']],
  ['the server\'s start', ['src/main.ts']],
  ['the command lines', ['src/cli/']],
];

function layerOf(file: string): number {
  const i = LAYERS.findIndex(([, patterns]) => patterns.some((p) => (p.endsWith('/') ? file.startsWith(p) : file === p)));
  assert.notEqual(i, -1, `${file} is in no layer: add it to LAYERS (test/layers.test.ts) and docs/architecture.md`);
  return i;
}

function sources(dir: string): string[] {
  return fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = `${dir}/${e.name}`;
    if (e.isDirectory()) return sources(rel);
    return /\.(ts|mts|mjs)$/.test(e.name) && !e.name.endsWith('.d.ts') ? [rel] : [];
  });
}

/** The relative imports of a file: static (values, types, re-exports) and dynamic, resolved from the root. */
function importsOf(file: string): string[] {
  const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
  const specs = [
    ...text.matchAll(/^\s*(?:import|export)\b[^'";]*?\bfrom\s*['"](\.{1,2}\/[^'"]+)['"]/gm),
    ...text.matchAll(/^\s*import\s*['"](\.{1,2}\/[^'"]+)['"]/gm),
    ...text.matchAll(/\bimport\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g),
  ].map((m) => m[1]!);
  return specs.map((s) => path.relative(ROOT, path.resolve(ROOT, path.dirname(file), s)).split(path.sep).join('/'));
}

const FILES = sources('src');
const GRAPH = new Map(FILES.map((f) => [f, importsOf(f).filter((t) => t.startsWith('src/') || t.startsWith('client/src/'))]));

test('the import reader sees every kind of import (or the checks below would pass on nothing)', () => {
  const kinds = { type: false, value: false, dynamic: false };
  for (const file of FILES) {
    const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
    if (/^import type .* from '\.\.?\//m.test(text)) kinds.type = true;
    if (/^import \{[^}]*\} from '\.\.?\//m.test(text)) kinds.value = true;
    if (/import\('\.\.?\//.test(text)) kinds.dynamic = true;
  }
  assert.deepEqual(kinds, { type: true, value: true, dynamic: true });
  // The ones we know of, found.
  assert.ok(GRAPH.get('src/cli/algohost.ts')!.includes('src/main.ts'), 'a dynamic import');
  assert.ok(GRAPH.get('src/algorithms/calls.ts')!.includes('src/algorithms/usage.ts'), 'a type import');
  assert.ok(GRAPH.get('src/services.ts')!.includes('src/store/backends.ts'), 'a value import');
  assert.ok(FILES.length > 100, `${FILES.length} files`);
});

test('every module imports only its own layer or the layers below', () => {
  const upward: string[] = [];
  for (const [file, imports] of GRAPH) {
    const mine = layerOf(file);
    for (const target of imports) {
      if (!fs.existsSync(path.join(ROOT, target))) continue; // typecheck's business
      const theirs = layerOf(target);
      if (theirs > mine) upward.push(`${file} (${LAYERS[mine]![0]}) imports ${target} (${LAYERS[theirs]![0]})`);
    }
  }
  assert.deepEqual(upward, []);
});

test('no import cycles between modules', () => {
  // Tarjan's strongly connected components: any of more than one module is a cycle.
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string) => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of GRAPH.get(v) ?? []) {
      if (!GRAPH.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1) cycles.push(component.sort());
    }
  };
  for (const v of GRAPH.keys()) if (!index.has(v)) visit(v);
  assert.deepEqual(cycles, []);
});
