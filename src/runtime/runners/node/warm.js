// Imported once by a pre-started runner (runner.mjs, `--spare`) while it waits for a build: the
// first dynamic import of a file sets up Node's module loader for it (~1 ms here, Node 20), which
// the build's own import would otherwise pay inside a cold call. A `.js` file written as an ES
// module, as a build's entry usually is: in the sandbox (/runner/node) no package.json says its
// type, so Node looks for one up to the root and tells the format from the syntax, the path a
// build's src/index.js takes (~0.8 ms more than an .mjs file warms). It has nothing to run.
export {};
