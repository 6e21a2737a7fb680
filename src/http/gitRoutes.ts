import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { tracedPrincipal, type Principal } from '../auth/principal.ts';
import { requestSpan } from '../tracing.ts';
import type { KeyService } from '../auth/keyService.ts';
import { GIT_AVAILABLE, type GitRepos } from '../algorithms/gitRepos.ts';
import { AppError } from '../errors.ts';

/** The content types of git's smart HTTP requests: their bodies stream to git, unparsed. */
const GIT_TYPES = ['application/x-git-upload-pack-request', 'application/x-git-receive-pack-request'];

/**
 * `/git/<owner>/<name>.git`: each algorithm's source over git's smart HTTP protocol (clone,
 * fetch, push). Git authenticates with HTTP Basic: the user name and an API key as password.
 */
export async function gitRoutes(app: FastifyInstance, opts: { repos: GitRepos; keys: KeyService; admitRequest?: (principal: Principal) => void | Promise<void> }): Promise<void> {
  const { repos, keys } = opts;
  app.addContentTypeParser(GIT_TYPES, (_req, payload, done) => done(null, payload));

  const handler = async (req: FastifyRequest<{ Params: { owner: string; repo: string; '*': string } }>, reply: FastifyReply) => {
    if (!GIT_AVAILABLE) throw new AppError('route_not_found', 'git is not installed on this server (Debian: apt-get install git), so sources are not served over git');
    const { owner, repo } = req.params;
    if (!repo.endsWith('.git')) throw new AppError('route_not_found', `git repositories are at /git/${owner}/<name>.git`);
    const authenticated = await basicAuth(req, keys, reply);
    if (!authenticated) return reply;
    // The user's requests a minute (docs/limits.md, "Requests"), before the body is read.
    await opts.admitRequest?.(authenticated);
    // A push's build is a child of this request's span (docs/traces.md).
    const principal = tracedPrincipal(authenticated, requestSpan(req.raw));
    const url = req.raw.url ?? '';
    const q = url.indexOf('?');
    const res = await repos.handle(principal, owner, repo.slice(0, -'.git'.length), {
      method: req.method,
      path: `/${req.params['*']}`,
      query: q < 0 ? '' : url.slice(q + 1),
      contentType: req.headers['content-type'],
      contentEncoding: req.headers['content-encoding'],
      contentLength: req.headers['content-length'],
      gitProtocol: typeof req.headers['git-protocol'] === 'string' ? req.headers['git-protocol'] : undefined,
      remoteAddr: req.ip,
      body: req.method === 'POST' ? req.raw : undefined,
    });
    reply.raw.once('close', () => {
      if (!reply.raw.writableFinished) res.abort();
    });
    return reply.code(res.status).headers(res.headers).send(res.body);
  };
  app.get('/git/:owner/:repo/*', handler);
  app.post('/git/:owner/:repo/*', handler);
}

/** The principal of an HTTP Basic `user:key`, or a 401 that makes git ask for credentials. */
async function basicAuth(req: FastifyRequest, keys: KeyService, reply: FastifyReply): Promise<Principal | undefined> {
  const header = req.headers.authorization ?? '';
  const m = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header);
  const challenge = () => {
    reply.header('www-authenticate', 'Basic realm="algohost", charset="UTF-8"');
  };
  if (!m) {
    challenge();
    throw new AppError('auth_required', 'authorization required: git authenticates with your user name and an API key as the password');
  }
  const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  const user = colon < 0 ? '' : decoded.slice(0, colon);
  const key = colon < 0 ? decoded : decoded.slice(colon + 1);
  let principal: Principal;
  try {
    principal = await keys.authenticate(`Simple ${key}`);
  } catch (err) {
    challenge();
    throw err;
  }
  if (user !== '' && user.toLowerCase() !== principal.username.toLowerCase()) {
    challenge();
    throw new AppError('invalid_authorization', `this API key belongs to ${principal.username}, not ${user.slice(0, 40)}: use your own user name with it`);
  }
  return principal;
}
