import type { Db } from '../store/db.ts';

/**
 * What `algohost cluster status` shows for a warm build, by the key it is kept under
 * (`<algorithm id>:<build hash>[:net]`, runtime/contract.ts targetKey): the algorithm's
 * owner/name/version, read from the shared database. A build no version was published from is
 * owner/name and its short hash; one the database does not know (deleted meanwhile) keeps its key.
 */
export async function warmNames(db: Db, keys: Iterable<string>): Promise<Map<string, string>> {
  const parsed = new Map<string, { id: number; hash: string; net: boolean }>();
  for (const key of keys) {
    const m = /^(\d{1,15}):([0-9a-f]{1,64})(:net)?$/.exec(key);
    if (m) parsed.set(key, { id: Number(m[1]), hash: m[2]!, net: m[3] !== undefined });
  }
  const names = new Map<string, string>();
  if (parsed.size === 0) return names;
  const ids = [...new Set([...parsed.values()].map((p) => p.id))];
  const algorithms = await db
    .selectFrom('algorithms')
    .innerJoin('users', 'users.id', 'algorithms.owner_id')
    .select(['algorithms.id as id', 'users.username as owner', 'algorithms.name as name'])
    .where('algorithms.id', 'in', ids)
    .execute();
  const versions = await db
    .selectFrom('versions')
    .innerJoin('builds', 'builds.id', 'versions.build_id')
    .select(['builds.algorithm_id as algorithmId', 'builds.hash as hash', 'versions.major', 'versions.minor', 'versions.patch'])
    .where('builds.algorithm_id', 'in', ids)
    .where('builds.hash', 'in', [...new Set([...parsed.values()].map((p) => p.hash))])
    .execute();
  const byId = new Map(algorithms.map((a) => [a.id, `${a.owner}/${a.name}`]));
  // The newest version made from each build (a build may be published more than once).
  const newest = new Map<string, [number, number, number]>();
  for (const v of versions) {
    const k = `${v.algorithmId}:${v.hash}`;
    const seen = newest.get(k);
    const mine: [number, number, number] = [v.major, v.minor, v.patch];
    if (!seen || (mine[0] - seen[0] || mine[1] - seen[1] || mine[2] - seen[2]) > 0) newest.set(k, mine);
  }
  for (const [key, p] of parsed) {
    const algorithm = byId.get(p.id);
    if (algorithm === undefined) continue;
    const version = newest.get(`${p.id}:${p.hash}`);
    const label = version ? `${algorithm}/${version.join('.')}` : `${algorithm} (unpublished build ${p.hash.slice(0, 12)})`;
    names.set(key, p.net ? `${label} +network` : label);
  }
  return names;
}
