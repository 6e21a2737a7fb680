import fs from 'node:fs/promises';
import path from 'node:path';
import type { Language } from './manifest.ts';

/**
 * The source an algorithm starts from before anything is uploaded: a runnable "hello"
 * per language, in the original service's layout (`src/<Name>.py`, `src/<Name>.js`). The
 * Python client's own tests compile a fresh algorithm and expect `hello <input>` back.
 * Without a name (an environment's template, made before the algorithm is named), the entry
 * is the name-free one a build also looks for: `src/main.py`, `src/index.js`.
 */
export function templateFiles(language: Language, name?: string): Record<string, string> {
  switch (language) {
    case 'python3':
      return {
        [name ? `src/${name}.py` : 'src/main.py']: `# The entry point: apply(input) is called once per request.
# input is a str (text), bytes (binary) or a parsed JSON value; the return value is the result.


def apply(input):
    return "hello {}".format(input)
`,
        'requirements.txt': '# Dependencies, one per line (pip).\n',
      };
    case 'javascript':
      return {
        [name ? `src/${name}.js` : 'src/index.js']: `// The entry point: apply(input, cb) is called once per request; call cb(error, result).
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

/** What `algo init` writes and `algo publish` reads, in the algorithm's directory. */
export const MANIFEST = 'algohost.json';

/** The entry file of a template, by language. */
export function entryFile(language: Language, name?: string): string {
  return Object.keys(templateFiles(language, name)).find((f) => f.startsWith('src/'))!;
}

/**
 * A starter directory: the template, a test input, a README that says what the code does, and
 * the manifest `algo publish` reads. `algo init` writes it, and the environments' template
 * archives (GET /v1/algorithm-environments/.../template) carry it, unnamed.
 */
export function starterFiles(language: Language, name?: string, owner?: string, summary?: string): Record<string, string> {
  const manifest = { ...(name ? { name } : {}), language, ...(owner ? { owner } : {}), ...(summary ? { summary } : {}), test_input: 'input.json' };
  return {
    ...templateFiles(language, name),
    'input.json': '"world"\n',
    'README.md': readme(language, name, owner),
    [MANIFEST]: `${JSON.stringify(manifest, null, 2)}\n`,
    ...(language === 'python3' ? {} : { '.gitignore': 'node_modules/\n' }),
  };
}

function readme(language: Language, name: string | undefined, owner: string | undefined): string {
  const entry = entryFile(language, name);
  const how = {
    python3: '`def apply(input)`, called once per request with the input (a str for text, bytes for binary, or the parsed JSON value); what it returns is the result (bytes: binary, str: text, anything else: JSON)',
    javascript:
      '`exports.apply = function (input, cb)`, called once per request with the input (a string for text, a Buffer for binary, or the parsed JSON value); it answers by calling `cb(error, result)` (returning a value or a promise instead works too)',
    typescript:
      '`export function apply(input)`, called once per request with the input (a string for text, a Buffer for binary, or the parsed JSON value); what it returns (or the promise resolves to) is the result',
  }[language];
  const deps = language === 'python3' ? '`requirements.txt` (pip)' : '`package.json` (npm), if you add one';
  const title = name ?? 'A new algorithm';
  const ref = `${owner ?? '<you>'}/${name ?? '<name>'}`;
  const naming = name ? '' : `\nName it first: add \`"name"\` to \`${MANIFEST}\` (or pass \`--name\` to \`algo publish\`).\n`;
  return `# ${title}

A ${language} algorithm for algohost, made from its starter template. It answers \`hello <input>\`.

- \`${entry}\`: the entry point, ${how}.
- Dependencies: ${deps}.
- \`input.json\`: a test input.
- \`${MANIFEST}\`: the algorithm's name and language (and owner and summary, if given), read by \`algo publish\`.
${naming}
Publish it: the first time this creates the algorithm; every time, it uploads this directory,
builds it, shows the build log and publishes a new version.

    algo publish          # a minor version (0.1.0, 0.2.0...); --major, --revision; --private
    algo run ${ref} -D input.json
    algo versions ${ref}
`;
}
