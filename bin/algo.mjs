#!/usr/bin/env node
// The `algo` client command. Runs the TypeScript sources through tsx's loader, like algohost.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli/algo/main.ts');
process.exitCode = await main(process.argv.slice(2), process.env, { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr });
