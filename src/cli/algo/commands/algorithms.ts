import type { Command } from '../context.ts';
import { connectors, keys } from './account.ts';
import { auth } from './auth.ts';
import { init, publish, versions } from './publish.ts';
import { run } from './run.ts';
import { usage } from './usage.ts';

/** Account and algorithm commands: auth, run, init, publish, versions, keys, connectors, usage. */
export const algorithmCommands: Record<string, Command> = { auth, run, init, publish, versions, keys, connectors, usage };
