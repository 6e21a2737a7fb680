import { execFileSync, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';

/** Debian's PostgreSQL 15 (package postgresql-15). */
export const PG_BIN = '/usr/lib/postgresql/15/bin';
/** The throwaway cluster's superuser and its password (TCP logins need it: scram-sha-256). */
export const PG_USER = 'algohost';
export const PG_PASSWORD = 'algohost-test';

export interface PostgresCluster {
  /** postgres://algohost:...@127.0.0.1:PORT/postgres */
  adminUrl: string;
  port: number;
  dir: string;
  /** Stops the cluster (fast shutdown) and removes its files. */
  stop(): void;
  /** Stops the server only (files kept), for tests of a database going away; start() brings it back. */
  halt(): void;
  start(): void;
}

export function postgresAvailable(): string | undefined {
  return fs.existsSync(path.join(PG_BIN, 'initdb')) ? undefined : `PostgreSQL 15 is not installed (${PG_BIN}/initdb): apt-get install postgresql-15`;
}

async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

/**
 * A throwaway PostgreSQL cluster on loopback in a temp directory: initdb + pg_ctl, as the
 * `postgres` user when we are root (PostgreSQL refuses to run as root). fsync is off: the
 * cluster dies with the test run. Stopped by its pid through pg_ctl, which waits for it.
 */
export async function startPostgres(): Promise<PostgresCluster> {
  const missing = postgresAvailable();
  if (missing) throw new Error(missing);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-pg-'));
  const asRoot = process.getuid?.() === 0;
  const run = (bin: string, args: string[]) => {
    const cmd = asRoot ? '/usr/sbin/runuser' : path.join(PG_BIN, bin);
    const full = asRoot ? ['-u', 'postgres', '--', path.join(PG_BIN, bin), ...args] : args;
    return execFileSync(cmd, full, { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: '/usr/bin:/bin', LANG: 'C' } });
  };
  if (asRoot) fs.chownSync(dir, uidOf('postgres'), gidOf('postgres'));
  const pwfile = path.join(dir, 'pw');
  fs.writeFileSync(pwfile, PG_PASSWORD + '\n');
  if (asRoot) fs.chownSync(pwfile, uidOf('postgres'), gidOf('postgres'));
  const data = path.join(dir, 'data');
  run('initdb', ['-D', data, '-U', PG_USER, '--pwfile', pwfile, '--auth-host=scram-sha-256', '--auth-local=trust', '-E', 'UTF8', '--locale=C.UTF-8', '--no-sync']);
  const port = await freePort();
  const start = () =>
    run('pg_ctl', [
      '-D',
      data,
      '-l',
      path.join(dir, 'log'),
      '-w',
      '-t',
      '30',
      '-o',
      `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400`,
      'start',
    ]);
  start();
  const halt = () => {
    try {
      run('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']);
    } catch {
      // Already stopped.
    }
  };
  return {
    adminUrl: `postgres://${PG_USER}:${PG_PASSWORD}@127.0.0.1:${port}/postgres`,
    port,
    dir,
    halt,
    start,
    stop() {
      halt();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

function uidOf(user: string): number {
  return Number(spawnSync('/usr/bin/id', ['-u', user], { encoding: 'utf8' }).stdout.trim());
}
function gidOf(user: string): number {
  return Number(spawnSync('/usr/bin/id', ['-g', user], { encoding: 'utf8' }).stdout.trim());
}

/** A new empty database in the cluster of `adminUrl`; its URL. */
export async function createDatabase(adminUrl: string, prefix = 't'): Promise<string> {
  const name = `${prefix}_${crypto.randomBytes(6).toString('hex')}`;
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE ${name} TEMPLATE template0`);
  } finally {
    await client.end();
  }
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  return u.toString();
}

/** One statement on its own connection (tests reading or arranging a database directly). */
export async function pgQuery<T extends pg.QueryResultRow>(url: string, text: string, values: unknown[] = []): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<T>(text, values)).rows;
  } finally {
    await c.end();
  }
}
