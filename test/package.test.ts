/**
 * `npm install` on a fresh clone must leave the checkout clean: the lock file's record of this
 * package (its root entry) says exactly what package.json says, or npm rewrites it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';

const readJson = (p: string) => JSON.parse(fs.readFileSync(new URL(`../${p}`, import.meta.url), 'utf8')) as Record<string, unknown>;

test('package-lock.json is in step with package.json', () => {
  const pkg = readJson('package.json');
  const lock = readJson('package-lock.json');
  const root = (lock.packages as Record<string, Record<string, unknown>>)[''];
  assert.ok(root, 'the lock has a root entry');
  assert.equal(lock.name, pkg.name);
  assert.equal(lock.version, pkg.version);
  for (const field of ['name', 'version', 'license', 'bin', 'engines', 'dependencies', 'devDependencies', 'optionalDependencies', 'peerDependencies']) {
    assert.deepEqual(root[field], pkg[field], `package-lock.json's root ${field} differs from package.json's: run npm install and commit the lock`);
  }
  // Every dependency is locked (one added to package.json by hand is not).
  const packages = lock.packages as Record<string, { version?: string }>;
  for (const deps of [pkg.dependencies, pkg.devDependencies] as (Record<string, string> | undefined)[]) {
    for (const name of Object.keys(deps ?? {})) assert.ok(packages[`node_modules/${name}`]?.version, `${name} is in the lock`);
  }
});
