#!/usr/bin/env node
// The `algo` client command. Runs the TypeScript sources as they are (bin/loader.mjs), like algohost.
import './loader.mjs';

const { main } = await import('../src/cli/algo/main.ts');
process.exitCode = await main(process.argv.slice(2), process.env, { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr });
