import { api, json, type TestServer } from './server.ts';

/** The data API path of a Data URI: `data://` under /v1/data, connected accounts under /v1/connector. */
export function dataPath(uri: string): string {
  const m = /^([a-z0-9+_-]+):\/\/(.*)$/i.exec(uri);
  if (!m) throw new Error(`not a data URI: ${uri}`);
  const segments = m[2] === '' ? [] : m[2]!.split('/').map(encodeURIComponent);
  const scheme = m[1]!;
  return scheme.toLowerCase() === 'data' ? `/v1/data/${segments.join('/')}` : `/v1/connector/${scheme}/${segments.join('/')}`;
}

/** Connects an account for `user` over the HTTP API and fails loudly if the server refuses. */
export async function connectAccount(server: TestServer, user: string, key: string, account: Record<string, unknown>): Promise<void> {
  const res = await api(server.url, key)(`/v1/users/${user}/connectors`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(account),
  });
  if (res.status !== 201 && res.status !== 200) throw new Error(`connecting ${String(account.label)} failed: ${res.status} ${JSON.stringify(await json(res))}`);
}
