// Imported first by bin/algohost.mjs and bin/algo.mjs (and by the benchmarks' servers): algohost's
// TypeScript sources run as they are, with no build step between a checkout and a running
// server. The hooks are in loaderHooks.mjs.
import { register } from 'node:module';

register('./loaderHooks.mjs', import.meta.url);
// Errors' stack traces through the inline source maps: the .ts file's lines.
process.setSourceMapsEnabled(true);
