import type { Command } from '../context.ts';

/** Account and algorithm commands: auth, run, init, publish, versions, keys, connectors. */
export const algorithmCommands: Record<string, Command> = {};
