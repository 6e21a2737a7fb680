import type { Command } from '../context.ts';

/** Data commands: ls, mkdir, rmdir, rm, cp, cat. */
export const dataCommands: Record<string, Command> = {};
