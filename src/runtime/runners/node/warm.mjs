// Imported once by a pre-started runner (runner.mjs, `--spare`) while it waits for a build: the
// first dynamic import of a file sets up Node's module loader for it (~1 ms here, Node 20), which
// the build's own import would otherwise pay inside a cold call. It has nothing to run.
export {};
