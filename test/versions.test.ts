import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { AppError } from '../src/errors.ts';
import { formatSemVer, nextVersion, parseSelector, resolveVersion, type PublishedVersion } from '../src/algorithms/versions.ts';

const v = (s: string, isPublic: boolean): PublishedVersion => {
  const [major, minor, patch] = s.split('.').map(Number) as [number, number, number];
  return { major, minor, patch, public: isPublic, buildHash: 'a'.repeat(40) };
};

// 0.1.0 public, 0.2.0 public, 0.10.0 public (numeric, not text, order), 1.0.0 public,
// 1.1.0 private, 1.0.1 public, 2.0.0 private
const PUBLISHED = [v('0.1.0', true), v('0.2.0', true), v('0.10.0', true), v('1.0.0', true), v('1.1.0', false), v('1.0.1', true), v('2.0.0', false)];

const pick = (sel: string | undefined, owner: boolean) => {
  const r = resolveVersion(PUBLISHED, parseSelector(sel), owner);
  return r ? formatSemVer(r) : undefined;
};

describe('version selectors (spec 9.2, compat.md)', () => {
  const table: [string | undefined, boolean, string | undefined][] = [
    [undefined, false, '1.0.1'],
    ['', false, '1.0.1'],
    ['latest', true, '1.0.1'],
    ['latestPrivate', true, '2.0.0'],
    ['latestPrivate', false, '1.0.1'],
    ['1.1.0', true, '1.1.0'],
    ['1.1.0', false, undefined],
    ['0.2.0', false, '0.2.0'],
    ['9.9.9', true, undefined],
    ['1.*', true, '1.0.1'],
    ['0.*', false, '0.10.0'],
    ['1.0.*', false, '1.0.1'],
    ['1.0', false, '1.0.1'],
    ['1.1.*', true, undefined],
    ['2.*', true, undefined],
    ['0.1', false, '0.1.0'],
    // `x` spells `*` (the issue's own example is `1.x`).
    ['1.x', true, '1.0.1'],
    ['1.0.X', false, '1.0.1'],
  ];
  for (const [sel, owner, want] of table) {
    test(`${JSON.stringify(sel)} as ${owner ? 'owner' : 'anyone'} → ${want ?? 'nothing'}`, () => assert.equal(pick(sel, owner), want));
  }

  test('a build hash is recognised (and resolved elsewhere)', () => {
    assert.deepEqual(parseSelector('ABCDEF0123456789abcdef0123456789abcdef01'), { kind: 'build', hash: 'abcdef0123456789abcdef0123456789abcdef01' });
  });

  for (const bad of ['1', '1.2.3.4', 'v1.2.3', '01.2.3', '1.*.3', '*', '1.x.3', 'x', 'latestprivate', 'abc', '1.2.3-beta']) {
    test(`"${bad}" is refused with invalid_version`, () => {
      assert.throws(() => parseSelector(bad), (err: unknown) => err instanceof AppError && err.code === 'invalid_version');
    });
  }
});

describe('next version on publish', () => {
  test('first publishes', () => {
    assert.equal(formatSemVer(nextVersion(undefined, 'minor')), '0.1.0');
    assert.equal(formatSemVer(nextVersion(undefined, 'major')), '1.0.0');
    assert.equal(formatSemVer(nextVersion(undefined, 'revision')), '0.0.1');
  });
  test('after 1.2.3', () => {
    const latest = { major: 1, minor: 2, patch: 3 };
    assert.equal(formatSemVer(nextVersion(latest, 'major')), '2.0.0');
    assert.equal(formatSemVer(nextVersion(latest, 'minor')), '1.3.0');
    assert.equal(formatSemVer(nextVersion(latest, 'revision')), '1.2.4');
  });
});
