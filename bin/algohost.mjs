#!/usr/bin/env node
// Runs the TypeScript sources directly (bin/loader.mjs): no build step between a checkout and a
// running server.
import './loader.mjs';

await import('../src/cli/algohost.ts');
