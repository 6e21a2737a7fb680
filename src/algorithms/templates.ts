import fs from 'node:fs/promises';
import path from 'node:path';
import type { Language } from './manifest.ts';

/**
 * The source an algorithm starts from before anything is uploaded: a runnable "hello"
 * per language, in the original service's layout (`src/<Name>.py`, `src/<Name>.js`). The
 * Python client's own tests compile a fresh algorithm and expect `hello <input>` back.
 */
export function templateFiles(language: Language, name: string): Record<string, string> {
  switch (language) {
    case 'python3':
      return {
        [`src/${name}.py`]: `# The entry point: apply(input) is called once per request.
# input is a str (text), bytes (binary) or a parsed JSON value; the return value is the result.


def apply(input):
    return "hello {}".format(input)
`,
        'requirements.txt': '# Dependencies, one per line (pip).\n',
      };
    case 'javascript':
      return {
        [`src/${name}.js`]: `// The entry point: apply(input, cb) is called once per request; call cb(error, result).
// input is a string (text), a Buffer (binary) or a parsed JSON value.
exports.apply = function (input, cb) {
  cb(null, 'hello ' + input);
};
`,
      };
    case 'typescript':
      return {
        'src/index.ts': `// The entry point: apply(input) is called once per request and may be async.
// input is a string (text), a Buffer (binary) or a parsed JSON value.
export function apply(input: unknown): string {
  return 'hello ' + String(input);
}
`,
      };
  }
}

/** Writes `files` (relative path → content) under `dir`, making directories as needed. */
export async function writeFiles(dir: string, files: Record<string, string>): Promise<void> {
  for (const [file, content] of Object.entries(files)) {
    await fs.mkdir(path.join(dir, path.dirname(file)), { recursive: true });
    await fs.writeFile(path.join(dir, file), content, { mode: 0o644 });
  }
}

export function writeTemplate(dir: string, language: Language, name: string): Promise<void> {
  return writeFiles(dir, templateFiles(language, name));
}
