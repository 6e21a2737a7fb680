import path from 'node:path';
import type { Principal } from '../auth/principal.ts';
import type { Language } from './manifest.ts';
import type { AlgorithmRegistry } from './registry.ts';
import type { BuildService } from './builds.ts';
import type { ReleaseService } from './releases.ts';
import { writeFiles } from './templates.ts';

interface DemoAlgorithm {
  name: string;
  language: Language;
  summary: string;
  files: Record<string, string>;
  sample: unknown;
}

/** What a new server shows: one algorithm per input kind, in both languages. */
export const DEMO_ALGORITHMS: readonly DemoAlgorithm[] = [
  {
    name: 'Hello',
    language: 'javascript',
    summary: 'Says hello: text in, "Hello " + text out.',
    sample: 'world',
    files: {
      'src/Hello.js': `// Text in, text out. Declaring the input types makes a JSON call an InputError.
exports.input_types = ['text'];
exports.apply = function (input, cb) {
  cb(null, 'Hello ' + input);
};
`,
    },
  },
  {
    name: 'Stats',
    language: 'javascript',
    summary: 'Summarises a JSON array of numbers: count, sum, mean, min, max.',
    sample: [1, 2, 3, 4],
    files: {
      'src/index.js': `export const input_types = ['json'];
export function apply(input) {
  if (!Array.isArray(input) || input.some((x) => typeof x !== 'number')) {
    throw new Error('send a JSON array of numbers, e.g. [1, 2, 3]');
  }
  const sum = input.reduce((a, b) => a + b, 0);
  return {
    count: input.length,
    sum,
    mean: input.length ? sum / input.length : null,
    min: input.length ? Math.min(...input) : null,
    max: input.length ? Math.max(...input) : null,
  };
}
`,
    },
  },
  {
    name: 'Reverse',
    language: 'javascript',
    summary: 'Reverses the bytes of a binary input (binary in, binary out).',
    sample: null,
    files: {
      'src/index.js': `export const input_types = ['binary'];
export function apply(input) {
  return Buffer.from(input).reverse();
}
`,
    },
  },
  {
    name: 'WordCount',
    language: 'python3',
    summary: 'Counts the words and lines of a text and names the most frequent words.',
    sample: 'the quick brown fox jumps over the lazy dog',
    files: {
      'src/WordCount.py': `from collections import Counter

INPUT_TYPES = ["text"]


def apply(input):
    words = input.lower().split()
    return {
        "words": len(words),
        "lines": len(input.splitlines()),
        "top": Counter(words).most_common(3),
    }
`,
    },
  },
];

/** What the console shows on a demo's page: what it does and how to call it. */
function demoReadme(owner: string, demo: DemoAlgorithm): string {
  const input = typeof demo.sample === 'string' ? demo.sample : JSON.stringify(demo.sample);
  const flag = typeof demo.sample === 'string' ? '-t' : demo.sample === null ? '-B' : '-j';
  return `# ${demo.name}

${demo.summary}

One of the algorithms every new algohost server starts with: a working example of
${demo.language === 'python3' ? 'a Python' : 'a JavaScript'} algorithm, to try calls with.

## Call it

\`\`\`
algo run ${owner}/${demo.name} ${flag} ${demo.sample === null ? 'FILE' : `'${input}'`}
\`\`\`

The source is open: it is the file under \`src/\`.
`;
}

/**
 * Publishes the demo algorithms under `owner` (the demo user of a new home): each is created,
 * given its source, built and published as a public 0.1.0. Returns the names published.
 */
export async function publishDemoAlgorithms(
  principal: Principal,
  services: { algorithms: AlgorithmRegistry; builds: BuildService; releases: ReleaseService },
  scratch: string,
): Promise<string[]> {
  const published: string[] = [];
  for (const demo of DEMO_ALGORITHMS) {
    const algo = await services.algorithms.create(principal, principal.username, {
      name: demo.name,
      details: { label: demo.name, summary: demo.summary, tagline: demo.summary },
      settings: { language: demo.language, source_visibility: 'open', license: 'apache2' },
    });
    const dir = path.join(scratch, demo.name);
    await writeFiles(dir, { 'README.md': demoReadme(principal.username, demo), ...demo.files });
    await services.builds.useSourceTree(algo, dir);
    const { build } = await services.builds.compile(principal, algo.owner, algo.name);
    if (build.status !== 'succeeded') throw new Error(`demo algorithm ${demo.name} did not build:\n${build.logs}`);
    await services.releases.publish(principal, algo.owner, algo.name, { version_info: { version_type: 'minor', sample_input: demo.sample } });
    published.push(`${algo.owner}/${algo.name}`);
  }
  return published;
}
