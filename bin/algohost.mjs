#!/usr/bin/env node
// Runs the TypeScript sources directly through tsx's loader: no build step between a
// checkout and a running server.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/algohost.ts');
