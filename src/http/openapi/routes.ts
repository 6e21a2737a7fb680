import type { Schema } from './schemas.ts';

/**
 * The API's route table for its OpenAPI description (document.ts): every public route as
 * fastify registers it (`method` and `route`, the pattern), the OpenAPI path or paths it
 * answers (a wildcard route answers several), and what it takes and answers. The routes
 * themselves stay schema-free; this table is kept true by two tests (docs/openapi.md): the set
 * of routes the app registers (its `onRoute` hook, registry.ts) must be the set below, and every
 * answer a server gives during the test suite is checked against the document (check.ts).
 */

export type Method = 'GET' | 'HEAD' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'OPTIONS';

export interface Param {
  name: string;
  in: 'path' | 'query' | 'header';
  description: string;
  required?: boolean;
  schema: Schema;
}

export interface Answer {
  description: string;
  /** Media type → schema; none: no body. */
  content?: Record<string, Schema>;
  headers?: Record<string, { description: string; schema?: Schema }>;
}

export interface RouteDoc {
  method: Method;
  /** The fastify pattern, as registered (`/v1/algo/*`, `/v1/users/:username/keys`). */
  route: string;
  /** The OpenAPI paths of this route (templates with `{name}`). */
  paths: string[];
  operationId: string;
  /** With several paths: an id for each (else the first path has `operationId`, the others a number after it). */
  operationIds?: string[];
  tag: string;
  summary: string;
  description?: string;
  /** `key`: Simple key (or the console's session); `none`: no credentials; `bearer`: the metrics token. */
  auth: 'key' | 'none' | 'bearer';
  parameters?: Param[];
  body?: { required: boolean; description?: string; content: Record<string, Schema> };
  /** Success (and other non-error) answers by status. */
  answers: Record<number, Answer>;
  /** Error statuses (each answered with the error envelope and a code of that status). */
  errors: number[];
  deprecated?: boolean;
  /** Served only when the server is set so (`metrics`: ALGOHOST_METRICS_TOKEN). */
  only?: 'metrics';
  /**
   * What the answer check (check.ts) holds a 200 JSON body to where OpenAPI cannot say it: the
   * document must allow any JSON there (a raw result, a JSON file), but unless the request's
   * query or the answer's header says so, the body is this.
   */
  strict?: { unless: { query?: [string, string]; header?: [string, string] }; schema: Schema };
}

const ref = (name: string): Schema => ({ $ref: `#/components/schemas/${name}` });
const json = (name: string): Record<string, Schema> => ({ 'application/json': ref(name) });
const ok = (name: string, description: string): Record<number, Answer> => ({ 200: { description, content: json(name) } });
const BINARY: Schema = { type: 'string', format: 'binary' };
const TEXT: Schema = { type: 'string' };

/** Path parameters by name: one description each, wherever they appear. */
export const PATH_PARAMS: Record<string, { description: string; schema?: Schema }> = {
  owner: { description: 'The user who owns the algorithm.' },
  name: { description: 'The algorithm\'s name.' },
  algoname: { description: 'The algorithm\'s name.' },
  version: { description: 'A version selector (spec 9.2): `1.2.3`, `1.2.*`, `1.*`, `latest`, or a build\'s hash (its owner only).' },
  username: { description: 'Your own user name (another user\'s is refused with `forbidden`).' },
  id: { description: 'The resource\'s id.' },
  ref: { description: 'A version (`1.2.3`) or a build hash.' },
  language: { description: 'A language: `python3`, `javascript` or `typescript`.' },
  label: { description: 'The connected account\'s label.' },
  delivery: { description: 'The delivery\'s id.' },
  connector: { description: 'The source: `data` (hosted data), `filehost`, `objstore`, or `<protocol>+<label>` for a labelled account.' },
  path: { description: 'The rest of the path, slashes included (`.my/collection/file.txt`); each segment percent-encoded.' },
  rest: { description: 'The rest of a retired path, slashes included.' },
};

/** Statuses any route behind a key may answer: a bad request, the key, the user's rights, a missing thing, the server. */
// Every request with a key or session may meet its user's requests a minute (docs/limits.md, "Requests"): 429.
const KEYED = [400, 401, 403, 404, 429, 500, 503];
const OPEN = [400, 500, 503];

const query = (name: string, description: string, schema: Schema = { type: 'string' }): Param => ({ name, in: 'query', description, schema });
const header = (name: string, description: string, schema: Schema = { type: 'string' }): Param => ({ name, in: 'header', description, schema });
const MARKER = query('marker', 'The `marker` of the previous page; none: the first page.');
const LIMIT = query('limit', 'How many, newest first (1 to 200, default 50).', { type: 'integer', minimum: 1, maximum: 200 });
const IDEMPOTENCY = header('Idempotency-Key', 'Makes a retried request answer as the first did instead of acting twice (docs/events.md#idempotency-key): 1 to 255 printable ASCII characters, kept 24 h.');
const REPLAYED = { 'Idempotent-Replayed': { description: '`true` when this is the stored answer of an earlier request with the same Idempotency-Key.' } };

// ---------------------------------------------------------------------------------------------
// Algorithm calls (spec 4.1)

const CALL_PATHS = ['/v1/algo/{owner}/{algoname}', '/v1/algo/{owner}/{algoname}/{version}'];
const WEB_CALL_PATHS = ['/v1/web/algo/{owner}/{algoname}', '/v1/web/algo/{owner}/{algoname}/{version}'];
const INPUT: RouteDoc['body'] = {
  required: false,
  description: 'The algorithm\'s input itself, not wrapped: its Content-Type says its kind (JSON, text, or bytes; none is bytes). At most 10 MiB: pass larger inputs as a data:// file.',
  content: {
    'application/json': { description: 'Any JSON value.' },
    'text/plain': TEXT,
    'application/text': TEXT,
    'application/octet-stream': BINARY,
  },
};
const CALL_QUERY: Param[] = [
  query('timeout', 'Seconds the call may run, above 0 and at most 3000 (default 300).', { type: 'number', exclusiveMinimum: 0, maximum: 3000, default: 300 }),
  query('stdout', 'Return the algorithm\'s standard output in metadata.stdout (its owner only).', { type: 'boolean', default: false }),
  query('output', '`raw`: answer the result itself (its own Content-Type), a failure as 400 text. `void`: run it asynchronously; the answer is its request id (GET /v1/requests/{id}).', { type: 'string', enum: ['raw', 'void'] }),
  IDEMPOTENCY,
];
const CALL_ANSWERS: Record<number, Answer> = {
  200: {
    description: 'The envelope (spec 2.2), with the result or the algorithm\'s error; with `output=void`, the async request\'s id; with `output=raw`, the result as it is (a void result is an empty text).',
    content: {
      'application/json': { anyOf: [ref('CallEnvelope'), ref('AsyncCallAccepted'), { description: 'output=raw: a JSON result, any JSON value.' }], description: 'The envelope, the accepted async call, or with output=raw a JSON result (any JSON value).' },
      'text/plain': { type: 'string', description: 'output=raw: a text (or void) result.' },
      'application/octet-stream': { ...BINARY, description: 'output=raw: a binary result.' },
    },
    headers: {
      ...REPLAYED,
      'X-Cold-Start': { description: '`true` when a worker was started for this call (a cold start), `false` when a warm one answered (sync calls).', schema: { type: 'string', enum: ['true', 'false'] } },
    },
  },
};
const CALL_ERRORS = [...KEYED, 409, 413, 415, 422];
const CALL_STRICT: RouteDoc['strict'] = { unless: { query: ['output', 'raw'] }, schema: { anyOf: [{ $ref: 'openapi.json#/components/schemas/CallEnvelope' }, { $ref: 'openapi.json#/components/schemas/AsyncCallAccepted' }] } };
const RAW_FAILURE: Answer = { description: 'With `output=raw`, the algorithm failed: the message as text. Otherwise an error envelope.', content: { 'text/plain': TEXT, 'application/json': ref('ErrorEnvelope') } };

const calls: RouteDoc[] = [
  {
    method: 'POST', route: '/v1/algo/*', paths: CALL_PATHS, operationId: 'callAlgorithm', operationIds: ['callAlgorithm', 'callAlgorithmVersion'], tag: 'Calls', auth: 'key',
    summary: 'Call an algorithm',
    description: 'Runs the algorithm on the input and answers its result (spec 4.1). An algorithm\'s failure is a 200 whose envelope carries `error`; requests the server refuses are error envelopes with their status. A reference written as `algo://owner/name` in the path is taken too.',
    parameters: CALL_QUERY, body: INPUT, answers: { ...CALL_ANSWERS, 400: RAW_FAILURE }, errors: CALL_ERRORS, strict: CALL_STRICT,
  },
  {
    method: 'POST', route: '/v1/web/algo/*', paths: WEB_CALL_PATHS, operationId: 'callAlgorithmFromBrowser', operationIds: ['callAlgorithmFromBrowser', 'callAlgorithmVersionFromBrowser'], tag: 'Calls', auth: 'key',
    summary: 'Call an algorithm from a web page',
    description: 'As /v1/algo, with CORS for the page\'s origin, for keys with `allow_web_algo` (and their `referer_host`).',
    parameters: CALL_QUERY, body: INPUT,
    answers: { ...CALL_ANSWERS, 400: RAW_FAILURE },
    errors: CALL_ERRORS, strict: CALL_STRICT,
  },
  {
    method: 'OPTIONS', route: '/v1/web/algo/*', paths: WEB_CALL_PATHS, operationId: 'callAlgorithmPreflight', operationIds: ['callAlgorithmPreflight', 'callAlgorithmVersionPreflight'], tag: 'Calls', auth: 'none',
    summary: 'CORS preflight of a browser call',
    answers: { 204: { description: 'The methods and headers a page may use.', headers: { 'Access-Control-Allow-Methods': { description: '`POST`' }, 'Access-Control-Allow-Headers': { description: 'Authorization, Content-Type, Idempotency-Key' } } } },
    errors: OPEN,
  },
  {
    method: 'GET', route: '/v1/requests/:id', paths: ['/v1/requests/{id}'], operationId: 'getAsyncRequest', tag: 'Calls', auth: 'key',
    summary: 'An async call\'s state and answer',
    description: 'For a call made with `output=void`, by the user whose key made it; kept for a while after it ends.',
    answers: ok('AsyncRequest', 'Its state, and its answer once done.'), errors: KEYED,
  },
];

// ---------------------------------------------------------------------------------------------
// Data (spec 4.2-4.9)

const FILE_HEADERS = {
  'X-Data-Type': { description: '`file` or `directory`.' },
  ETag: { description: 'The file\'s version.' },
  'Last-Modified': { description: 'When the file was written.' },
  'Accept-Ranges': { description: '`bytes`' },
};

function dataOps(route: string, path: string, idBase: string, note: string, deprecated = false): RouteDoc[] {
  const common = { route, paths: [path], tag: 'Data', auth: 'key' as const, ...(deprecated ? { deprecated } : {}) };
  const errs = [...KEYED, 409, 502, 504];
  return [
    {
      ...common, method: 'GET', operationId: `get${idBase}`,
      summary: `Read a file, or list a directory${note}`,
      description: 'A directory: its folders and files, 1000 at most per page (`marker` for the next). A file: its bytes, streamed, with Range and If-None-Match.',
      parameters: [
        MARKER,
        query('acl', 'With a directory listing, its ACL.', { type: 'boolean', default: false }),
        query('download', 'Any value: the file is sent as an attachment (the console\'s download links carry a ticket here in place of a key).'),
        header('Range', 'One byte range of a file (`bytes=0-99`).'),
        header('If-None-Match', 'An ETag: 304 when the file is still that version.'),
      ],
      answers: {
        200: {
          description: 'The file\'s bytes (its own Content-Type), or the directory\'s listing (JSON); X-Data-Type says which.',
          content: { 'application/json': { anyOf: [ref('ListingPage'), { description: 'A file whose type is JSON (X-Data-Type: file).' }] }, '*/*': { ...BINARY, description: 'The file.' } },
          headers: FILE_HEADERS,
        },
        206: { description: 'The range asked for.', content: { '*/*': BINARY }, headers: { ...FILE_HEADERS, 'Content-Range': { description: '`bytes START-END/SIZE`' } } },
        304: { description: 'Not modified (If-None-Match).' },
      },
      errors: [...errs, 416],
      strict: { unless: { header: ['x-data-type', 'file'] }, schema: { $ref: 'openapi.json#/components/schemas/ListingPage' } },
    },
    {
      ...common, method: 'HEAD', operationId: `head${idBase}`,
      summary: `Check that a file or directory exists${note}`,
      answers: { 200: { description: 'It exists: X-Data-Type says which; a file\'s Content-Length, ETag, Last-Modified.', headers: FILE_HEADERS }, 206: { description: 'The range asked for.' }, 304: { description: 'Not modified.' } },
      errors: [...errs, 416],
    },
    {
      ...common, method: 'PUT', operationId: `put${idBase}`,
      summary: `Upload a file${note}`,
      description: 'The body is the file, streamed as it arrives, whatever its type; it replaces a file of that name.',
      parameters: [IDEMPOTENCY],
      body: { required: true, description: 'The file\'s content.', content: { 'application/octet-stream': BINARY, '*/*': BINARY } },
      answers: { 200: { description: 'The Data URI of the file.', content: json('DataUriResult'), headers: REPLAYED } },
      errors: [...errs, 413, 422, 429],
    },
    {
      ...common, method: 'POST', operationId: `createDirectory${idBase}`,
      summary: `Create a directory${note}`,
      description: 'The path is the parent; the body names the new directory (JSON, or the bare name as text/plain).',
      body: { required: true, content: { 'application/json': ref('NewDirectory'), 'text/plain': TEXT } },
      answers: ok('DataUriResult', 'The Data URI of the new directory.'),
      errors: [...errs, 413],
    },
    {
      ...common, method: 'PATCH', operationId: `updateDirectory${idBase}`,
      summary: `Change a directory's ACL${note}`,
      body: { required: true, content: json('DirectoryChanges') },
      answers: ok('DataUriResult', 'The Data URI of the directory.'),
      errors: [...errs, 413],
    },
    {
      ...common, method: 'DELETE', operationId: `delete${idBase}`,
      summary: `Delete a file or directory${note}`,
      description: 'A directory must be empty unless `force=true`. A failure part-way says how many files were deleted (`error.deleted`).',
      parameters: [query('force', 'Delete a directory with all it holds.', { type: 'boolean', default: false })],
      answers: ok('DeleteResult', 'How many files were deleted.'),
      errors: errs,
    },
  ];
}

const data: RouteDoc[] = [
  ...dataOps('/v1/data', '/v1/data', 'DataRoot', ' (the root of hosted data)'),
  ...dataOps('/v1/data/*', '/v1/data/{path}', 'Data', ''),
  ...dataOps('/v1/connector/*', '/v1/connector/{connector}/{path}', 'Connector', ' (any source)'),
  ...dataOps('/api/v1/connector/*', '/api/v1/connector/{connector}/{path}', 'ApiConnector', ' (the reference form with /api)', true),
];

// ---------------------------------------------------------------------------------------------
// Algorithms, builds, versions, environments

const A = '/v1/algorithms/{owner}/{name}';
const algorithms: RouteDoc[] = [
  { method: 'GET', route: '/v1/algorithms', paths: ['/v1/algorithms'], operationId: 'searchAlgorithms', tag: 'Algorithms', auth: 'key', summary: 'Search the marketplace', parameters: [query('q', 'Words to look for in names and details.'), MARKER], answers: ok('AlgorithmPage', 'Public algorithms, a page.'), errors: KEYED },
  { method: 'GET', route: '/v1/users/:owner/algorithms', paths: ['/v1/users/{owner}/algorithms'], operationId: 'listUserAlgorithms', tag: 'Algorithms', auth: 'key', summary: 'A user\'s algorithms', description: 'All of them for their owner; the public ones for anyone else.', parameters: [MARKER], answers: ok('AlgorithmPage', 'A page.'), errors: KEYED },
  { method: 'POST', route: '/v1/algorithms/:owner', paths: ['/v1/algorithms/{owner}'], operationId: 'createAlgorithm', tag: 'Algorithms', auth: 'key', summary: 'Create an algorithm', body: { required: true, content: json('AlgorithmChanges') }, answers: { 201: { description: 'Created.', content: json('Algorithm') } }, errors: [...KEYED, 409, 413, 415] },
  { method: 'GET', route: '/v1/algorithms/:owner/:name', paths: [A], operationId: 'getAlgorithm', tag: 'Algorithms', auth: 'key', summary: 'An algorithm', answers: ok('Algorithm', 'The algorithm.'), errors: KEYED },
  { method: 'PUT', route: '/v1/algorithms/:owner/:name', paths: [A], operationId: 'updateAlgorithm', tag: 'Algorithms', auth: 'key', summary: 'Change an algorithm', body: { required: true, content: json('AlgorithmChanges') }, answers: ok('Algorithm', 'As it is now.'), errors: [...KEYED, 409, 413, 415] },
  { method: 'DELETE', route: '/v1/algorithms/:owner/:name', paths: [A], operationId: 'deleteAlgorithm', tag: 'Algorithms', auth: 'key', summary: 'Delete an algorithm', description: 'Only one never published.', answers: { 204: { description: 'Deleted.' } }, errors: [...KEYED, 409] },
  {
    method: 'PUT', route: '/v1/algorithms/:owner/:name/source', paths: [`${A}/source`], operationId: 'uploadSource', tag: 'Builds', auth: 'key', summary: 'Upload the source',
    description: 'A tar.gz archive of the algorithm\'s source, streamed; compile it next.',
    body: { required: true, content: { 'application/gzip': BINARY, 'application/x-gzip': BINARY, 'application/octet-stream': BINARY } },
    answers: ok('SourceUpload', 'What was kept.'), errors: [...KEYED, 409, 413, 415],
  },
  { method: 'POST', route: '/v1/algorithms/:owner/:name/compile', paths: [`${A}/compile`], operationId: 'compileAlgorithm', tag: 'Builds', auth: 'key', summary: 'Build the latest source', description: 'Waits for the build; a failed build is a 200 with `compilation.successful: false` and its output.', answers: ok('CompileResult', 'The build.'), errors: [...KEYED, 409, 429] },
  { method: 'GET', route: '/v1/algorithms/:owner/:name/builds', paths: [`${A}/builds`], operationId: 'listBuilds', tag: 'Builds', auth: 'key', summary: 'An algorithm\'s builds', answers: ok('BuildPage', 'Newest first.'), errors: KEYED },
  { method: 'GET', route: '/v1/algorithms/:owner/:name/builds/:id', paths: [`${A}/builds/{id}`], operationId: 'getBuild', tag: 'Builds', auth: 'key', summary: 'A build', answers: ok('Build', 'The build.'), errors: KEYED },
  { method: 'GET', route: '/v1/algorithms/:owner/:name/builds/:id/logs', paths: [`${A}/builds/{id}/logs`], operationId: 'getBuildLogs', tag: 'Builds', auth: 'key', summary: 'A build\'s output', answers: ok('BuildLogs', 'The build\'s output.'), errors: KEYED },
  { method: 'POST', route: '/v1/algorithms/:owner/:name/versions', paths: [`${A}/versions`], operationId: 'publishVersion', tag: 'Versions', auth: 'key', summary: 'Publish the latest build', body: { required: false, content: json('PublishRequest') }, answers: ok('AlgorithmVersion', 'The new version.'), errors: [...KEYED, 409, 413, 415] },
  { method: 'POST', route: '/v1/algorithms/:owner/:name/version', paths: [`${A}/version`], operationId: 'publishVersionSingular', tag: 'Versions', auth: 'key', summary: 'Publish the latest build (the TypeScript client\'s path)', body: { required: false, content: json('PublishRequest') }, answers: ok('AlgorithmVersion', 'The new version.'), errors: [...KEYED, 409, 413, 415] },
  { method: 'GET', route: '/v1/algorithms/:owner/:name/versions', paths: [`${A}/versions`], operationId: 'listVersions', tag: 'Versions', auth: 'key', summary: 'An algorithm\'s versions', parameters: [MARKER], answers: ok('AlgorithmVersionPage', 'Newest first.'), errors: KEYED },
  { method: 'GET', route: '/v1/algorithms/:owner/:name/versions/:ref', paths: [`${A}/versions/{ref}`], operationId: 'getVersion', tag: 'Versions', auth: 'key', summary: 'A version', answers: ok('AlgorithmVersion', 'The version.'), errors: KEYED },
  { method: 'GET', route: '/v1/algorithms/:owner/:name/versions/:ref/readme', paths: [`${A}/versions/{ref}/readme`], operationId: 'getVersionReadme', tag: 'Versions', auth: 'key', summary: 'A version\'s README', answers: ok('VersionReadme', 'Its Markdown, or null.'), errors: KEYED },
  { method: 'GET', route: '/v1/algorithm-environments/edge/languages', paths: ['/v1/algorithm-environments/edge/languages'], operationId: 'listLanguages', tag: 'Environments', auth: 'key', summary: 'The languages algorithms can be written in', answers: { 200: { description: 'The languages.', content: { 'application/json': { type: 'array', items: ref('LanguageInfo') } } } }, errors: KEYED },
  { method: 'GET', route: '/v1/algorithm-environments/edge/languages/:language/environments', paths: ['/v1/algorithm-environments/edge/languages/{language}/environments'], operationId: 'listEnvironments', tag: 'Environments', auth: 'key', summary: 'A language\'s environments', answers: { 200: { description: 'Its environments.', content: { 'application/json': { type: 'object', properties: { environments: { type: 'array', items: ref('Environment') } }, required: ['environments'] } } } }, errors: KEYED },
  { method: 'GET', route: '/v1/algorithm-environments/edge/environment-specifications/:id/template', paths: ['/v1/algorithm-environments/edge/environment-specifications/{id}/template'], operationId: 'getEnvironmentTemplate', tag: 'Environments', auth: 'key', summary: 'A starter algorithm, as a tar.gz download', answers: { 200: { description: 'The archive (Content-Disposition: attachment).', content: { 'application/gzip': BINARY } } }, errors: KEYED },
];

// ---------------------------------------------------------------------------------------------
// The user's own business: who am I, keys, connected accounts, usage, limits, password

const U = '/v1/users/{username}';
const account: RouteDoc[] = [
  { method: 'GET', route: '/v1/user', paths: ['/v1/user'], operationId: 'whoAmI', tag: 'Keys', auth: 'key', summary: 'Who this key belongs to and what it may do', answers: ok('WhoAmI', 'The key\'s user and permissions.'), errors: KEYED },
  { method: 'GET', route: '/v1/users/:username/keys', paths: [`${U}/keys`], operationId: 'listKeys', tag: 'Keys', auth: 'key', summary: 'Your API keys', answers: ok('KeyPage', 'Every key (never the keys themselves).'), errors: KEYED },
  { method: 'POST', route: '/v1/users/:username/keys', paths: [`${U}/keys`], operationId: 'createKey', tag: 'Keys', auth: 'key', summary: 'Make an API key', body: { required: true, content: json('NewKey') }, answers: { 201: { description: 'The key, shown this once.', content: json('CreatedKey') } }, errors: [...KEYED, 409, 413, 415] },
  { method: 'GET', route: '/v1/users/:username/keys/:id', paths: [`${U}/keys/{id}`], operationId: 'getKey', tag: 'Keys', auth: 'key', summary: 'An API key', answers: ok('KeyRecord', 'The key\'s record.'), errors: KEYED },
  { method: 'PATCH', route: '/v1/users/:username/keys/:id', paths: [`${U}/keys/{id}`], operationId: 'updateKey', tag: 'Keys', auth: 'key', summary: 'Rename a key or change its permissions', body: { required: true, content: json('KeyChanges') }, answers: ok('KeyRecord', 'As it is now.'), errors: [...KEYED, 409, 413, 415] },
  { method: 'DELETE', route: '/v1/users/:username/keys/:id', paths: [`${U}/keys/{id}`], operationId: 'revokeKey', tag: 'Keys', auth: 'key', summary: 'Revoke a key', answers: { 204: { description: 'Revoked.' } }, errors: KEYED },
  { method: 'GET', route: '/v1/users/:username/connectors', paths: [`${U}/connectors`], operationId: 'listConnectedAccounts', tag: 'Connected accounts', auth: 'key', summary: 'Your connected storage accounts', answers: ok('ConnectedAccountPage', 'Every account (credentials never shown).'), errors: KEYED },
  { method: 'POST', route: '/v1/users/:username/connectors', paths: [`${U}/connectors`], operationId: 'createConnectedAccount', tag: 'Connected accounts', auth: 'key', summary: 'Connect a storage account', body: { required: true, content: json('ConnectedAccountInput') }, answers: { 201: { description: 'Connected.', content: json('ConnectedAccount') } }, errors: [...KEYED, 409, 413, 415, 502, 504] },
  { method: 'GET', route: '/v1/users/:username/connectors/:label', paths: [`${U}/connectors/{label}`], operationId: 'getConnectedAccount', tag: 'Connected accounts', auth: 'key', summary: 'A connected account', answers: ok('ConnectedAccount', 'The account.'), errors: KEYED },
  { method: 'PATCH', route: '/v1/users/:username/connectors/:label', paths: [`${U}/connectors/{label}`], operationId: 'updateConnectedAccount', tag: 'Connected accounts', auth: 'key', summary: 'Change a connected account', body: { required: true, content: json('ConnectedAccountInput') }, answers: ok('ConnectedAccount', 'As it is now.'), errors: [...KEYED, 409, 413, 415, 502, 504] },
  { method: 'DELETE', route: '/v1/users/:username/connectors/:label', paths: [`${U}/connectors/{label}`], operationId: 'deleteConnectedAccount', tag: 'Connected accounts', auth: 'key', summary: 'Disconnect an account', answers: { 204: { description: 'Disconnected.' } }, errors: KEYED },
  {
    method: 'GET', route: '/v1/users/:username/usage', paths: [`${U}/usage`], operationId: 'getUsage', tag: 'Usage and limits', auth: 'key', summary: 'Your usage per day and algorithm version',
    parameters: [query('from', 'First UTC day, YYYY-MM-DD (default: 30 days before `to`).', { type: 'string', format: 'date' }), query('to', 'Last UTC day, YYYY-MM-DD (default: today).', { type: 'string', format: 'date' })],
    answers: ok('UsageReport', 'As a caller and as an owner.'), errors: KEYED,
  },
  { method: 'GET', route: '/v1/users/:username/limits', paths: [`${U}/limits`], operationId: 'getLimits', tag: 'Usage and limits', auth: 'key', summary: 'The call limits in force and what is left of them', answers: ok('Limits', 'Yours, and the asking key\'s own.'), errors: KEYED },
  { method: 'PUT', route: '/v1/users/:username/password', paths: [`${U}/password`], operationId: 'changePassword', tag: 'Sessions', auth: 'key', summary: 'Change your console password', body: { required: true, content: json('PasswordChange') }, answers: { 204: { description: 'Changed (other sessions end).' } }, errors: [...KEYED, 413, 415] },
];

// ---------------------------------------------------------------------------------------------
// Events: the live stream, webhooks, triggers (docs/events.md)

const S = `${U}/subscriptions`;
const T = `${U}/triggers`;
const events: RouteDoc[] = [
  {
    method: 'GET', route: '/v1/users/:username/events', paths: [`${U}/events`], operationId: 'streamEvents', tag: 'Events', auth: 'key', summary: 'Your events as they happen (Server-Sent Events)',
    description: 'A stream that stays open: each message\'s `id:` is the event\'s id and its `data:` the CloudEvent (JSON, see CloudEvent). `Last-Event-ID` resumes after an event still kept.',
    parameters: [
      query('types', 'Event types, comma-separated, `*` as a suffix (`data.file.*,call.completed`).'),
      query('path', 'Only events whose subject is under this data path.'),
      query('last_event_id', 'As the Last-Event-ID header.'),
      header('Last-Event-ID', 'Resume after this event (`evt_…`).'),
    ],
    answers: { 200: { description: 'The stream: `retry:`, then `id:`/`data:` messages and `: keep-alive` comments.', content: { 'text/event-stream': { type: 'string', description: 'Server-Sent Events; each data: line is a CloudEvent in JSON.' } } } },
    errors: [...KEYED, 410, 429],
  },
  { method: 'POST', route: '/v1/users/:username/subscriptions', paths: [S], operationId: 'createSubscription', tag: 'Webhooks', auth: 'key', summary: 'Subscribe a URL to your events', body: { required: true, content: json('SubscriptionInput') }, answers: { 201: { description: 'Subscribed, with its signing secret shown this once.', content: json('SubscriptionWithSecret') } }, errors: [...KEYED, 409, 413, 415] },
  { method: 'GET', route: '/v1/users/:username/subscriptions', paths: [S], operationId: 'listSubscriptions', tag: 'Webhooks', auth: 'key', summary: 'Your webhook subscriptions', answers: ok('SubscriptionList', 'Every subscription.'), errors: KEYED },
  { method: 'GET', route: '/v1/users/:username/subscriptions/:id', paths: [`${S}/{id}`], operationId: 'getSubscription', tag: 'Webhooks', auth: 'key', summary: 'A subscription', answers: ok('Subscription', 'The subscription.'), errors: KEYED },
  { method: 'PATCH', route: '/v1/users/:username/subscriptions/:id', paths: [`${S}/{id}`], operationId: 'updateSubscription', tag: 'Webhooks', auth: 'key', summary: 'Change a subscription', body: { required: true, content: json('SubscriptionInput') }, answers: ok('Subscription', 'As it is now.'), errors: [...KEYED, 413, 415] },
  { method: 'DELETE', route: '/v1/users/:username/subscriptions/:id', paths: [`${S}/{id}`], operationId: 'deleteSubscription', tag: 'Webhooks', auth: 'key', summary: 'Delete a subscription', answers: { 204: { description: 'Deleted.' } }, errors: KEYED },
  { method: 'POST', route: '/v1/users/:username/subscriptions/:id/secret', paths: [`${S}/{id}/secret`], operationId: 'rotateSubscriptionSecret', tag: 'Webhooks', auth: 'key', summary: 'Make a new signing secret', answers: ok('SubscriptionWithSecret', 'With its new secret.'), errors: KEYED },
  { method: 'POST', route: '/v1/users/:username/subscriptions/:id/test', paths: [`${S}/{id}/test`], operationId: 'testSubscription', tag: 'Webhooks', auth: 'key', summary: 'Send a test event', answers: { 202: { description: 'Queued for delivery.', content: json('Delivery') } }, errors: KEYED },
  { method: 'GET', route: '/v1/users/:username/subscriptions/:id/deliveries', paths: [`${S}/{id}/deliveries`], operationId: 'listDeliveries', tag: 'Webhooks', auth: 'key', summary: 'A subscription\'s deliveries with their attempts', parameters: [LIMIT], answers: ok('DeliveryList', 'Newest first.'), errors: KEYED },
  { method: 'POST', route: '/v1/users/:username/subscriptions/:id/deliveries/:delivery/redeliver', paths: [`${S}/{id}/deliveries/{delivery}/redeliver`], operationId: 'redeliver', tag: 'Webhooks', auth: 'key', summary: 'Send a delivery again', answers: { 202: { description: 'Queued again.', content: json('Delivery') } }, errors: KEYED },
  { method: 'POST', route: '/v1/users/:username/triggers', paths: [T], operationId: 'createTrigger', tag: 'Triggers', auth: 'key', summary: 'Run an algorithm on your events', body: { required: true, content: json('TriggerInput') }, answers: { 201: { description: 'Created.', content: json('Trigger') } }, errors: [...KEYED, 409, 413, 415] },
  { method: 'GET', route: '/v1/users/:username/triggers', paths: [T], operationId: 'listTriggers', tag: 'Triggers', auth: 'key', summary: 'Your triggers', answers: ok('TriggerList', 'Every trigger.'), errors: KEYED },
  { method: 'GET', route: '/v1/users/:username/triggers/:id', paths: [`${T}/{id}`], operationId: 'getTrigger', tag: 'Triggers', auth: 'key', summary: 'A trigger', answers: ok('Trigger', 'The trigger.'), errors: KEYED },
  { method: 'PATCH', route: '/v1/users/:username/triggers/:id', paths: [`${T}/{id}`], operationId: 'updateTrigger', tag: 'Triggers', auth: 'key', summary: 'Change a trigger', body: { required: true, content: json('TriggerInput') }, answers: ok('Trigger', 'As it is now.'), errors: [...KEYED, 413, 415] },
  { method: 'DELETE', route: '/v1/users/:username/triggers/:id', paths: [`${T}/{id}`], operationId: 'deleteTrigger', tag: 'Triggers', auth: 'key', summary: 'Delete a trigger', answers: { 204: { description: 'Deleted.' } }, errors: KEYED },
  { method: 'GET', route: '/v1/users/:username/triggers/:id/runs', paths: [`${T}/{id}/runs`], operationId: 'listTriggerRuns', tag: 'Triggers', auth: 'key', summary: 'A trigger\'s runs', parameters: [LIMIT], answers: ok('TriggerRunList', 'Newest first.'), errors: KEYED },
];

// ---------------------------------------------------------------------------------------------
// Sessions (the console's sign-in), the server itself

const NO_STORE = { 'Cache-Control': { description: '`no-store`' } };
const server: RouteDoc[] = [
  {
    method: 'POST', route: '/v1/session', paths: ['/v1/session'], operationId: 'signIn', tag: 'Sessions', auth: 'none', summary: 'Sign in to the console',
    description: 'Sets the session cookie (HttpOnly, Secure, SameSite=Strict); later requests carry it with the answer\'s `csrf_token` in `X-CSRF-Token`, in place of a key.',
    body: { required: true, content: json('SignIn') },
    answers: { 200: { description: 'Signed in.', content: json('SessionInfo'), headers: { 'Set-Cookie': { description: 'The session cookie.' }, ...NO_STORE } } },
    errors: [...OPEN, 401, 403, 413, 415, 429],
  },
  { method: 'GET', route: '/v1/session', paths: ['/v1/session'], operationId: 'getSession', tag: 'Sessions', auth: 'none', summary: 'The session of this browser\'s cookie', answers: { 200: { description: 'Signed in.', content: json('SessionInfo'), headers: NO_STORE } }, errors: [...OPEN, 401, 403] },
  { method: 'DELETE', route: '/v1/session', paths: ['/v1/session'], operationId: 'signOut', tag: 'Sessions', auth: 'none', summary: 'Sign out', description: 'Takes the session\'s `X-CSRF-Token`.', answers: { 204: { description: 'Signed out; the cookie is cleared.' } }, errors: [...OPEN, 401, 403] },
  { method: 'POST', route: '/v1/session/downloads', paths: ['/v1/session/downloads'], operationId: 'makeDownloadLink', tag: 'Sessions', auth: 'none', summary: 'A link that downloads one file with this session', description: 'Cookie and X-CSRF-Token; the link is good for a minute.', body: { required: true, content: json('DownloadRequest') }, answers: { 200: { description: 'The link.', content: json('DownloadLink'), headers: NO_STORE } }, errors: [...OPEN, 401, 403, 413, 415] },
  { method: 'GET', route: '/health', paths: ['/health'], operationId: 'health', tag: 'Server', auth: 'none', summary: 'Whether this node can serve', answers: { 200: { description: 'It can.', content: json('Health') }, 503: { description: 'It cannot (a backend is down): the same report.', content: json('Health') } }, errors: [400, 500] },
  {
    method: 'GET', route: '/v1/openapi.json', paths: ['/v1/openapi.json'], operationId: 'openapi', tag: 'Server', auth: 'none', summary: 'This description (OpenAPI 3.1)',
    answers: { 200: { description: 'The document.', content: { 'application/json': { type: 'object', required: ['openapi', 'paths'] } } } }, errors: OPEN,
  },
  {
    method: 'GET', route: '/metrics', paths: ['/metrics'], operationId: 'metrics', tag: 'Server', auth: 'bearer', only: 'metrics', summary: 'Prometheus metrics (with ALGOHOST_METRICS_TOKEN set)',
    answers: { 200: { description: 'Prometheus text format.', content: { 'text/plain': TEXT } } }, errors: [400, 401, 500, 503],
  },
];

// ---------------------------------------------------------------------------------------------
// Retired routes (spec 9.1)

const RETIRED: Method[] = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];
const retired: RouteDoc[] = (['/api', '/data'] as const).flatMap((prefix) =>
  RETIRED.map((method): RouteDoc => ({
    method, route: `${prefix}/*`, paths: [`${prefix}/{rest}`], operationId: `retired${prefix === '/api' ? 'Api' : 'Data'}${method[0]}${method.slice(1).toLowerCase()}`,
    tag: 'Retired', auth: 'none', deprecated: true, summary: `Unversioned ${prefix}/ routes (retired)`,
    description: `Always 410 \`deprecated_route\`, naming the /v1 route of the same operation.`,
    answers: {}, errors: [400, 410, 503],
  })),
);

/** Every documented route. */
export const ROUTES: readonly RouteDoc[] = [...calls, ...data, ...algorithms, ...account, ...events, ...server, ...retired];

/**
 * Routes the app registers that are not the API, and so not in the document: each with why.
 * (The route-set test, test/openapi.test.ts, holds the app to this list and ROUTES.)
 */
export const UNDOCUMENTED: readonly { route: string; why: string }[] = [
  { route: '/', why: 'the web console\'s page (docs/console.md)' },
  { route: '/console/:file', why: 'the web console\'s files' },
  { route: '/git/:owner/:repo/*', why: 'git\'s smart HTTP protocol, spoken by git itself (docs/git.md)' },
];

/**
 * Methods fastify's `app.all` adds that OpenAPI 3.1 cannot name (WebDAV's and others): the
 * retired /api and /data routes answer them too, with the same 410.
 */
export const UNNAMEABLE_METHODS = new Set(['PROPFIND', 'PROPPATCH', 'MKCOL', 'COPY', 'MOVE', 'LOCK', 'UNLOCK', 'TRACE', 'SEARCH', 'REPORT', 'MKCALENDAR', 'ACL', 'BIND', 'CHECKOUT', 'CONNECT', 'LINK', 'MERGE', 'M-SEARCH', 'NOTIFY', 'PURGE', 'REBIND', 'SOURCE', 'SUBSCRIBE', 'UNBIND', 'UNLINK', 'UNSUBSCRIBE', 'QUERY']);
