import type { FastifyInstance, FastifyRequest } from 'fastify';
import { checkObject } from './body.ts';
import type { Algorithm, AlgorithmRegistry } from '../algorithms/registry.ts';
import type { Build, BuildService } from '../algorithms/builds.ts';
import type { ReleaseService, Version } from '../algorithms/releases.ts';
import { formatSemVer } from '../algorithms/versions.ts';
import { AppError } from '../errors.ts';
import type {
  Algorithm as AlgorithmRecord, AlgorithmVersion, Build as BuildRecord, BuildLogs, CompileResult, Page, SourceUpload, VersionReadme,
} from '../../client/src/types.ts';

interface OwnerParams {
  owner: string;
}
interface AlgoParams extends OwnerParams {
  name: string;
}

function baseUrl(req: FastifyRequest): string {
  return `${req.protocol}://${req.host}`;
}

/** The algorithm object of the original management API (compat.md). */
function present(req: FastifyRequest, a: Algorithm): AlgorithmRecord {
  return {
    id: String(a.id),
    name: a.name,
    owner: a.owner,
    details: a.details,
    settings: a.settings,
    resource_type: 'algorithm',
    self_link: `${baseUrl(req)}/v1/algorithms/${a.owner}/${a.name}`,
    created_at: new Date(a.created_at).toISOString(),
    updated_at: new Date(a.updated_at).toISOString(),
  };
}

const body = (req: FastifyRequest, allowed: readonly string[]) => checkObject(req.body, allowed);

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** A build as the original API's build records look (compat.md), plus our status and entry. */
function presentBuild(b: Build): BuildRecord {
  return {
    build_id: b.hash,
    commit_sha: b.hash,
    status: b.status === 'building' ? 'in-progress' : b.status,
    language: b.language,
    entry: b.entry,
    started_at: iso(b.started_at),
    finished_at: iso(b.finished_at),
    resource_type: 'algorithm_build',
    version_info: { git_hash: b.hash },
  };
}

/** An algorithm as published in a version: its settings then, and the version's facts. */
function presentVersion(req: FastifyRequest, a: Algorithm, v: Version): AlgorithmVersion {
  return {
    ...present(req, { ...a, settings: { ...v.settings, algorithm_callability: v.callability } }),
    version_info: {
      semantic_version: formatSemVer(v),
      git_hash: v.buildHash,
      release_notes: v.release_notes,
      sample_input: v.sample_input,
    },
    published_at: iso(v.created_at),
  };
}

/**
 * What the official clients send: the Python client's create, update and publish add
 * `version_info`, `source` and `scmsCredentials` (empty objects by default) to the original
 * API's fields; the registry uses or refuses each, saying why.
 */
const ALGORITHM_FIELDS = ['name', 'details', 'settings', 'version_info', 'source', 'scmsCredentials'] as const;
const PUBLISH_FIELDS = ['details', 'settings', 'version_info', 'source', 'scmsCredentials'] as const;

/** Source archives: gzip by any of its usual names (tar.gz has no single registered type). */
const ARCHIVE_TYPES = ['application/gzip', 'application/x-gzip', 'application/tar+gzip', 'application/x-tar+gzip', 'application/x-compressed-tar', 'application/octet-stream'];

/** Management of algorithm records: create, read, update, delete, list an owner's. */
export async function algorithmRoutes(app: FastifyInstance, opts: { registry: AlgorithmRegistry; builds: BuildService; releases: ReleaseService }): Promise<void> {
  const { registry, builds, releases } = opts;
  // Archives are streamed to the extractor by the route, not parsed here.
  app.addContentTypeParser(ARCHIVE_TYPES, (_req, _payload, done) => done(null, undefined));
  // The Python client's update() hands its dict to requests as form data, which keeps only
  // the names of the fields inside details and settings: say so rather than apply nothing.
  app.addContentTypeParser('application/x-www-form-urlencoded', (_req, _payload, done) =>
    done(
      new AppError(
        'unsupported_media_type',
        'this body is form-encoded, which carries only field names here (the Python client 2.x sends update() this way and its values are lost); send the fields as JSON with Content-Type: application/json',
      ),
      undefined,
    ),
  );

  app.post<{ Params: OwnerParams }>('/v1/algorithms/:owner', async (req, reply) => {
    const algo = await registry.create(req.principal!, req.params.owner, body(req, ALGORITHM_FIELDS));
    return reply.code(201).send(present(req, algo));
  });

  app.get<{ Params: AlgoParams }>('/v1/algorithms/:owner/:name', async (req) =>
    present(req, await registry.require(req.principal!, req.params.owner, req.params.name)),
  );

  app.put<{ Params: AlgoParams }>('/v1/algorithms/:owner/:name', async (req) =>
    present(req, await registry.update(req.principal!, req.params.owner, req.params.name, body(req, ALGORITHM_FIELDS))),
  );

  app.delete<{ Params: AlgoParams }>('/v1/algorithms/:owner/:name', async (req, reply) => {
    await builds.remove(req.principal!, req.params.owner, req.params.name);
    return reply.code(204).send();
  });

  app.put<{ Params: AlgoParams }>('/v1/algorithms/:owner/:name/source', async (req) => {
    const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (!ARCHIVE_TYPES.includes(type)) {
      throw new AppError('unsupported_media_type', 'send the source as a tar.gz archive with Content-Type: application/gzip');
    }
    const source = await builds.uploadSource(req.principal!, req.params.owner, req.params.name, req.raw);
    return { source: { hash: source.hash, files: source.files, bytes: source.bytes } } satisfies SourceUpload;
  });

  app.post<{ Params: AlgoParams }>('/v1/algorithms/:owner/:name/compile', async (req) => {
    const { algorithm, build } = await builds.compile(req.principal!, req.params.owner, req.params.name);
    return {
      ...present(req, algorithm),
      version_info: { git_hash: build.hash },
      compilation: { successful: build.status === 'succeeded', output: build.logs },
      build: presentBuild(build),
    } satisfies CompileResult;
  });

  app.get<{ Params: AlgoParams }>('/v1/algorithms/:owner/:name/builds', async (req) => {
    const list = await builds.list(req.principal!, req.params.owner, req.params.name);
    return { marker: null, next_link: null, results: list.map(presentBuild) } satisfies Page<BuildRecord>;
  });

  app.get<{ Params: AlgoParams & { id: string } }>('/v1/algorithms/:owner/:name/builds/:id', async (req) =>
    presentBuild(await builds.get(req.principal!, req.params.owner, req.params.name, req.params.id)),
  );

  app.get<{ Params: AlgoParams & { id: string } }>('/v1/algorithms/:owner/:name/builds/:id/logs', async (req) => {
    const build = await builds.get(req.principal!, req.params.owner, req.params.name, req.params.id);
    return { logs: build.logs } satisfies BuildLogs;
  });

  // The TypeScript client posts to .../version (singular).
  for (const route of ['/v1/algorithms/:owner/:name/versions', '/v1/algorithms/:owner/:name/version']) {
    app.post<{ Params: AlgoParams }>(route, async (req, reply) => {
      const input = body(req, PUBLISH_FIELDS);
      const { algorithm, version } = await releases.publish(req.principal!, req.params.owner, req.params.name, input);
      return reply.code(200).send(presentVersion(req, algorithm, version));
    });
  }

  app.get<{ Params: AlgoParams; Querystring: { marker?: string } }>('/v1/algorithms/:owner/:name/versions', async (req) => {
    const page = await releases.list(req.principal!, req.params.owner, req.params.name, req.query.marker || undefined);
    const next = page.marker ? `${baseUrl(req)}/v1/algorithms/${page.algorithm.owner}/${page.algorithm.name}/versions?marker=${encodeURIComponent(page.marker)}` : null;
    return { marker: page.marker, next_link: next, results: page.results.map((v) => presentVersion(req, page.algorithm, v)) } satisfies Page<AlgorithmVersion>;
  });

  app.get<{ Params: AlgoParams & { ref: string } }>('/v1/algorithms/:owner/:name/versions/:ref', async (req) => {
    const { algorithm, version } = await releases.get(req.principal!, req.params.owner, req.params.name, req.params.ref);
    return presentVersion(req, algorithm, version);
  });

  // A version's README (Markdown, as its author wrote it: rendering and sanitising are the reader's).
  app.get<{ Params: AlgoParams & { ref: string } }>('/v1/algorithms/:owner/:name/versions/:ref/readme', async (req) => {
    const { algorithm, version } = await releases.get(req.principal!, req.params.owner, req.params.name, req.params.ref);
    return { version: formatSemVer(version), readme: await builds.readme(algorithm.id, version.buildHash) } satisfies VersionReadme;
  });

  app.get<{ Querystring: { q?: string; marker?: string } }>('/v1/algorithms', async (req) => {
    const q = typeof req.query.q === 'string' ? req.query.q : '';
    const page = await registry.searchPublic(q, req.query.marker || undefined);
    const next = page.marker ? `${baseUrl(req)}/v1/algorithms?${new URLSearchParams({ ...(q ? { q } : {}), marker: page.marker }).toString()}` : null;
    return { marker: page.marker, next_link: next, results: page.results.map((a) => present(req, a)) } satisfies Page<AlgorithmRecord>;
  });

  app.get<{ Params: OwnerParams; Querystring: { marker?: string } }>('/v1/users/:owner/algorithms', async (req) => {
    const page = await registry.listByOwner(req.principal!, req.params.owner, req.query.marker || undefined);
    const next = page.marker ? `${baseUrl(req)}/v1/users/${req.params.owner}/algorithms?marker=${encodeURIComponent(page.marker)}` : null;
    return { marker: page.marker, next_link: next, results: page.results.map((a) => present(req, a)) } satisfies Page<AlgorithmRecord>;
  });
}
