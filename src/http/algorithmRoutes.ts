import type { FastifyInstance, FastifyRequest } from 'fastify';
import { checkObject } from './body.ts';
import type { Algorithm, AlgorithmRegistry } from '../algorithms/registry.ts';

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
function present(req: FastifyRequest, a: Algorithm) {
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

/** Management of algorithm records: create, read, update, delete, list an owner's. */
export async function algorithmRoutes(app: FastifyInstance, opts: { registry: AlgorithmRegistry }): Promise<void> {
  const { registry } = opts;

  app.post<{ Params: OwnerParams }>('/v1/algorithms/:owner', async (req, reply) => {
    const algo = await registry.create(req.principal!, req.params.owner, body(req, ['name', 'details', 'settings']));
    return reply.code(201).send(present(req, algo));
  });

  app.get<{ Params: AlgoParams }>('/v1/algorithms/:owner/:name', async (req) =>
    present(req, await registry.require(req.principal!, req.params.owner, req.params.name)),
  );

  // version_info is accepted for the Python client, which sends it with updates; it belongs
  // to the next publish and is not stored here.
  app.put<{ Params: AlgoParams }>('/v1/algorithms/:owner/:name', async (req) => {
    const { version_info: _ignored, ...changes } = body(req, ['name', 'details', 'settings', 'version_info']);
    return present(req, await registry.update(req.principal!, req.params.owner, req.params.name, changes));
  });

  app.delete<{ Params: AlgoParams }>('/v1/algorithms/:owner/:name', async (req, reply) => {
    await registry.delete(req.principal!, req.params.owner, req.params.name);
    return reply.code(204).send();
  });

  app.get<{ Params: OwnerParams; Querystring: { marker?: string } }>('/v1/users/:owner/algorithms', async (req) => {
    const page = await registry.listByOwner(req.principal!, req.params.owner, req.query.marker || undefined);
    const next = page.marker ? `${baseUrl(req)}/v1/users/${req.params.owner}/algorithms?marker=${encodeURIComponent(page.marker)}` : null;
    return { marker: page.marker, next_link: next, results: page.results.map((a) => present(req, a)) };
  });
}
