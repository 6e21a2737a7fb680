import type { FastifyInstance } from 'fastify';
import type { Environments } from '../algorithms/environments.ts';

/**
 * The original API's algorithm environments, as the Python CLI asks for them (`algo languages`,
 * `algo environment <language>`, `algo template <id> <dir>`).
 */
export async function environmentRoutes(app: FastifyInstance, opts: { environments: Environments }): Promise<void> {
  const { environments } = opts;
  const base = '/v1/algorithm-environments/edge';

  app.get(`${base}/languages`, async () => environments.languages());

  app.get<{ Params: { language: string } }>(`${base}/languages/:language/environments`, async (req) => ({
    environments: environments.ofLanguage(req.params.language),
  }));

  app.get<{ Params: { id: string } }>(`${base}/environment-specifications/:id/template`, async (req, reply) => {
    const archive = await environments.template(req.params.id);
    return reply.type('application/gzip').header('content-disposition', 'attachment; filename="template.tar.gz"').send(archive);
  });
}
