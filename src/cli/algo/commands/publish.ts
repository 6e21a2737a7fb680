import fs from 'node:fs';
import path from 'node:path';
import { Transform, pipeline } from 'node:stream';
import { ApiError, packDirectory, type Algorithm, type AlgorithmVersion, type Language, type SourceInfo, type VersionType } from '../../../../client/src/index.ts';
import { MANIFEST, starterFiles, writeFiles } from '../../../algorithms/templates.ts';
import { CliError, UsageError, type Command, type Context } from '../context.ts';
import { size } from '../progress.ts';
import { Prompter } from './prompt.ts';
import { isJson, noMore, parseArgs, resolveUser, shellQuote, table, utf8 } from './common.ts';

export { MANIFEST };

interface Manifest {
  name: string;
  language: Language;
  /** Optional: whose algorithm it is (else the key's user). */
  owner?: string;
  /** A test input file, relative to the directory: the curl line `publish` prints sends it. */
  test_input?: string;
  /** One line on what it does: the marketplace card shows it (the algorithm's details.summary). */
  summary?: string;
}

/** Longest summary taken (the server takes more; a card shows a line or two). */
const SUMMARY_MAX = 200;

function checkSummary(value: string, flag: string): string {
  const summary = value.trim();
  if (summary.length > SUMMARY_MAX || /\p{Cc}/u.test(summary)) throw new UsageError(`${flag} is one line of ${SUMMARY_MAX} characters at most`);
  return summary;
}

/**
 * The summary asked for at a terminal (not with --json, nor when stdin is piped: scripts give
 * --summary); undefined when it is not asked or left empty.
 */
async function askSummary(ctx: Context, name: string): Promise<string | undefined> {
  if (ctx.json || ctx.io.stdin.isTTY !== true) return undefined;
  const prompter = new Prompter(ctx.io);
  try {
    const answer = await prompter.ask(`Summary of ${name}, one line for its marketplace card (Enter to skip): `);
    return answer === undefined || answer.trim() === '' ? undefined : checkSummary(answer, 'the summary');
  } finally {
    prompter.close();
  }
}

const LANGUAGES: Record<string, Language> = {
  python3: 'python3', python: 'python3', py: 'python3',
  javascript: 'javascript', js: 'javascript', nodejs: 'javascript', node: 'javascript',
  typescript: 'typescript', ts: 'typescript',
};
const ALGORITHM_NAME = /^[A-Za-z][A-Za-z0-9_]{0,63}$/;
const USERNAME = /^[A-Za-z][A-Za-z0-9_]{0,29}$/;
/** Never uploaded: installed packages are rebuilt by the server, history is not source. */
const SKIPPED = new Set(['node_modules', '.git']);

function language(value: string | undefined, flag: string): Language {
  const lang = value === undefined ? undefined : LANGUAGES[value.toLowerCase()];
  if (!lang) throw new UsageError(`${flag} is one of python3, javascript, typescript${value === undefined ? '' : ` (got "${value}")`}`);
  return lang;
}

export const init: Command = {
  summary: 'make a directory with a runnable algorithm template',
  usage: `usage: algo init [owner/]<name> --language python3|javascript|typescript [--dir DIR]
                 [--summary TEXT]

Writes the language's template (answers "hello <input>"), a test input (input.json), a short
README and ${MANIFEST} (name, language, owner and summary if given) into DIR (default:
./<name>), which must not exist or be empty. Then \`algo publish DIR\`.
  --summary TEXT   one line on what it does, shown on its marketplace card; asked for at a
                   terminal when not given`,

  async run(ctx, argv) {
    const args = parseArgs(argv, { language: { short: 'l', value: true }, dir: { value: true }, summary: { value: true } });
    const ref = args.positionals[0];
    if (!ref) throw new UsageError('name the algorithm: algo init <name> --language ...');
    noMore(args, 1);
    const parts = ref.split('/');
    const name = parts[parts.length - 1]!;
    const owner = parts.length === 2 ? parts[0] : undefined;
    if (parts.length > 2 || (owner !== undefined && !USERNAME.test(owner))) throw new UsageError(`"${ref}" is not [owner/]name`);
    if (!ALGORITHM_NAME.test(name)) throw new UsageError(`"${name}" is not an algorithm name: a letter, then letters, digits or "_" (64 at most)`);
    const lang = language(args.string('language'), '--language');
    const dir = path.resolve(args.string('dir') ?? name);
    if (fs.existsSync(dir) && (!fs.statSync(dir).isDirectory() || fs.readdirSync(dir).length > 0)) {
      throw new CliError(`${dir} already exists and is not an empty directory; choose another with --dir`);
    }
    const given = args.string('summary');
    const summary = given !== undefined ? checkSummary(given, '--summary') : await askSummary(ctx, name);
    const files = starterFiles(lang, name, owner, summary || undefined);
    await writeFiles(dir, files);
    const rel = path.relative(process.cwd(), dir) || '.';
    ctx.result({ dir, name, language: lang, owner: owner ?? null, summary: summary || null, files: Object.keys(files).sort() }, () =>
      `Created ${rel}/ (${lang}): ${Object.keys(files).sort().join(', ')}\nNext: algo publish ${shellQuote(rel)}`,
    );
  },
};

/** Whether semantic version `a` is above `b`. */
function newer(a: string, b: string): boolean {
  const [x, y] = [a, b].map((v) => v.split('.').map(Number));
  for (let i = 0; i < 3; i++) if (x![i] !== y![i]) return x![i]! > y![i]!;
  return false;
}

function readManifest(dir: string): Partial<Manifest> | undefined {
  let text: string;
  try {
    text = fs.readFileSync(path.join(dir, MANIFEST), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  try {
    return JSON.parse(text) as Partial<Manifest>;
  } catch (err) {
    throw new CliError(`${path.join(dir, MANIFEST)} is not valid JSON: ${(err as Error).message}`);
  }
}

/** The test input as curl arguments (`-H type -d data`), if it is small text. */
function curlInput(dir: string, file: string | undefined): string {
  const fallback = `-H 'Content-Type: text/plain' -d world`;
  if (!file) return fallback;
  let bytes: Buffer;
  try {
    bytes = fs.readFileSync(path.resolve(dir, file));
  } catch {
    return fallback;
  }
  const text = bytes.length <= 1024 ? utf8(bytes) : undefined;
  if (text === undefined) return `-H 'Content-Type: application/octet-stream' --data-binary @${shellQuote(path.resolve(dir, file))}`;
  const type = isJson(text) ? 'application/json' : 'text/plain';
  return `-H 'Content-Type: ${type}' --data-binary ${shellQuote(text.replace(/\n$/, ''))}`;
}

/** A stream that counts what passes into a progress bar. */
function counting(onBytes: (n: number) => void): Transform {
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      onBytes(chunk.length);
      callback(null, chunk);
    },
  });
}

export const publish: Command = {
  summary: 'upload a directory, build it and publish a new version (creating the algorithm if needed)',
  usage: `usage: algo publish [DIR] [--major|--minor|--revision] [--public|--private] [--owner NAME]
                    [--name NAME] [--language LANG] [--notes TEXT] [--summary TEXT]
                    [--build latest]

Reads DIR/${MANIFEST} (written by \`algo init\`; --name and --language stand in for it),
creates the algorithm if it does not exist, uploads DIR (without node_modules and .git),
builds it (the build log is shown; a failed build stops here), publishes the build as a new
version and prints it with a curl line that calls it.
  --build latest               publish the algorithm's latest build as it stands, without
                               uploading or building: after a \`git push\` (which builds what
                               it pushed), or a compile; DIR is read for its manifest only
  --summary TEXT               one line on what it does, for its marketplace card (default:
                               the manifest's "summary", which \`algo init\` asks for)
  --major|--minor|--revision   which part of the version to bump (default --minor;
                               the first version is 1.0.0, 0.1.0 or 0.0.1)
  --public|--private           who may call this version (default: the algorithm's setting,
                               public for a new one); a private version is the owner's alone,
                               by its number or latestPrivate, and the public ones stay as they
                               are for everyone else
  --owner NAME                 the algorithm's owner (default: the manifest's "owner", else
                               the user the API key belongs to)
  --notes TEXT                 release notes`,

  async run(ctx, argv) {
    const args = parseArgs(argv, {
      major: {}, minor: {}, revision: {}, public: {}, private: {},
      owner: { value: true }, name: { value: true }, language: { short: 'l', value: true }, notes: { value: true },
      summary: { value: true }, build: { value: true },
    });
    const buildFlag = args.string('build');
    if (buildFlag !== undefined && buildFlag !== 'latest') throw new UsageError(`--build takes latest (the algorithm's latest build), not "${buildFlag}"`);
    const latestBuild = buildFlag === 'latest';
    noMore(args, 1);
    const bumps = (['major', 'minor', 'revision'] as const).filter((b) => args.flag(b));
    if (bumps.length > 1) throw new UsageError(`choose one of --${bumps.join(', --')}`);
    const versionType: VersionType = bumps[0] ?? 'minor';
    if (args.flag('public') && args.flag('private')) throw new UsageError('choose --public or --private, not both');
    const callability = args.flag('public') ? 'public' : args.flag('private') ? 'private' : undefined;

    const dir = path.resolve(args.positionals[0] ?? '.');
    if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) throw new CliError(`${dir} is not a directory`);
    const manifest = readManifest(dir) ?? {};
    const name = args.string('name') ?? manifest.name;
    if (!name) throw new CliError(`no ${MANIFEST} in ${dir}: run \`algo init\`, or pass --name and --language`);
    if (!ALGORITHM_NAME.test(name)) throw new UsageError(`"${name}" is not an algorithm name: a letter, then letters, digits or "_"`);
    const langText = args.string('language') ?? manifest.language;
    // --build latest publishes a build already made, in its own language: none is needed then.
    const lang = latestBuild && langText === undefined ? undefined : language(langText, args.string('language') !== undefined ? '--language' : `"language" in ${MANIFEST}`);
    const owner = await resolveUser(ctx, args.string('owner') ?? manifest.owner, '--owner');
    const summaryFlag = args.string('summary');
    const summary = summaryFlag !== undefined ? checkSummary(summaryFlag, '--summary') : typeof manifest.summary === 'string' ? checkSummary(manifest.summary, `"summary" in ${MANIFEST}`) : undefined;

    const client = ctx.client();
    const algo = client.algo(`${owner}/${name}`);
    const ref = `${owner}/${name}`;
    let created = false;
    let existing: Algorithm | undefined;
    try {
      existing = await algo.info();
    } catch (err) {
      if (!(err instanceof ApiError && err.code === 'algorithm_not_found')) throw err;
    }
    if (!existing && (latestBuild || !lang)) throw new CliError(`${ref} does not exist, so it has no build: publish ${shellQuote(path.relative(process.cwd(), dir) || '.')} without --build to upload and build it`);
    if (!existing) {
      // --private is about the version published now, not the algorithm: created public, its
      // later public versions reach others (an algorithm created private never would).
      await algo.create({ details: { label: name, ...(summary ? { summary } : {}) }, settings: { language: lang } });
      created = true;
      ctx.note(`Created ${ref} (${lang})`);
    } else {
      // The build is as it was made: its language is not changed under it.
      const language = !latestBuild && lang && existing.settings.language !== lang ? lang : undefined;
      const newSummary = summary !== undefined && summary !== (existing.details.summary ?? '') ? summary : undefined;
      if (language !== undefined || newSummary !== undefined) {
        await algo.update({ ...(language ? { settings: { language } } : {}), ...(newSummary !== undefined ? { details: { summary: newSummary } } : {}) });
      }
      if (language) ctx.note(`${ref}: language changed from ${existing.settings.language} to ${lang}`);
      if (newSummary !== undefined) ctx.note(`${ref}: summary set to "${newSummary}"`);
    }

    const built = latestBuild ? { source: null, log: null } : await uploadAndBuild(ctx, algo, ref, dir, created);
    const { source, log } = built;

    const notes = args.string('notes');
    const version: AlgorithmVersion = await algo.publish({
      version_info: { version_type: versionType, ...(notes !== undefined ? { release_notes: notes } : {}) },
      ...(callability ? { settings: { algorithm_callability: callability } } : {}),
    });
    const semver = version.version_info.semantic_version;
    if (latestBuild) ctx.note(`Published the latest build, ${version.version_info.git_hash.slice(0, 12)}, as it stands (nothing uploaded or built)`);
    const visibility = version.settings.algorithm_callability;
    // What others call now: the latest public version (a private publish leaves it as it was).
    let publicVersion: string | null = null;
    for await (const v of algo.versions()) {
      if (v.settings.algorithm_callability === 'public' && (publicVersion === null || newer(v.version_info.semantic_version, publicVersion))) {
        publicVersion = v.version_info.semantic_version;
      }
    }
    const curl = `curl -H "Authorization: Simple $ALGORITHMIA_API_KEY" ${curlInput(dir, manifest.test_input)} ${client.baseUrl}/v1/algo/${ref}/${semver}`;
    const others =
      visibility === 'public'
        ? ''
        : publicVersion
          ? `\nOnly you can call ${semver} (as ${ref}/${semver} or ${ref}/latestPrivate); others, and ${ref} without a version, still get ${publicVersion}, the latest public version.`
          : `\nOnly you can call it (as ${ref}/${semver}, ${ref}/latestPrivate, or ${ref}); ${ref} has no public version, so others cannot call it.`;
    ctx.result(
      { algorithm: ref, created, version: semver, build_id: version.version_info.git_hash, callability: visibility, public_version: publicVersion, source, build_log: log, curl },
      () => `Published ${ref} ${semver} (${visibility})${others}\nCall it (with ALGORITHMIA_API_KEY set to a key):\n  ${curl}\nor: algo run ${ref}/${semver} -d world`,
    );
  },
};

type AlgoHandle = ReturnType<ReturnType<Context['client']>['algo']>;

/** Uploads DIR and builds it, the build log shown as it grows; fails when the build does. */
async function uploadAndBuild(ctx: Context, algo: AlgoHandle, ref: string, dir: string, created: boolean): Promise<{ source: SourceInfo; log: string }> {
  // Upload: the archive is made as it is sent, so its size is only known at the end.
  const upload = ctx.progress(`uploading ${ref}`);
  let source;
  try {
    const archive = packDirectory(dir, { filter: (rel) => !rel.split('/').some((part) => SKIPPED.has(part)) });
    const counted = counting((n) => upload.add(n));
    // pipeline hands a packing error (an unreadable file) on to the upload, which fails with it.
    pipeline(archive, counted, () => {});
    source = await algo.uploadSource(counted);
  } finally {
    upload.done();
  }
  ctx.note(`Uploaded ${source.files} files (${size(source.bytes)})`);

  // Build: the compile request answers when the build is done; meanwhile the build's log
  // grows on the server and is followed here, so a long npm or pip install shows as it goes.
  const started = Date.now();
  const building = ctx.progress(`building ${ref}`, undefined, false);
  const tick = setInterval(() => building.label(`building ${ref} ${Math.round((Date.now() - started) / 1000)}s`), 1000);
  let shown = '';
  const show = (text: string) => {
    if (ctx.json || text === '') return;
    building.done();
    ctx.io.stderr.write(text);
  };
  const follower = followBuildLog(algo, started, (logSoFar) => {
    if (logSoFar.startsWith(shown) && logSoFar.length > shown.length) {
      show(logSoFar.slice(shown.length));
      shown = logSoFar;
    }
  });
  let build;
  try {
    build = await algo.compile();
  } finally {
    clearInterval(tick);
    await follower.stop();
    building.done();
  }
  const log = build.compilation.output;
  // What the follower did not show yet (or, if the log was cut to its head and tail meanwhile, all of it).
  if (log.startsWith(shown)) show(log.slice(shown.length));
  else show(`\n--- the whole build log ---\n${log}`);
  if (!ctx.json && log && !log.endsWith('\n')) ctx.io.stderr.write('\n');
  if (!build.compilation.successful) {
    if (ctx.json) ctx.result({ algorithm: ref, created, build_id: build.version_info.git_hash, successful: false, build_log: log });
    throw new CliError(`the build of ${ref} failed${ctx.json ? '' : ' (log above)'}; nothing was published`);
  }

  return { source, log };
}

export const versions: Command = {
  summary: 'list the published versions of an algorithm, newest first',
  usage: `usage: algo versions <owner/name>

Its owner sees private versions too; others see public ones.`,

  async run(ctx, argv) {
    const args = parseArgs(argv, {});
    const ref = args.positionals[0];
    if (!ref) throw new UsageError('which algorithm? (owner/name)');
    noMore(args, 1);
    const algo = ctx.client().algo(ref);
    if (algo.version) throw new UsageError(`name the algorithm without a version: ${algo.owner}/${algo.name}`);
    const all: AlgorithmVersion[] = [];
    for await (const v of algo.versions()) all.push(v);
    ctx.result(all, () => {
      if (all.length === 0) return `${algo.owner}/${algo.name} has no published versions${ctx.json ? '' : ': `algo publish` makes one'}`;
      return table(
        ['VERSION', 'PUBLISHED', 'CALLABLE', 'BUILD', 'NOTES'],
        all.map((v) => [
          v.version_info.semantic_version,
          v.published_at ?? '',
          v.settings.algorithm_callability,
          v.version_info.git_hash.slice(0, 12),
          v.version_info.release_notes ?? '',
        ]),
      );
    });
  },
};

/**
 * Polls the algorithm's running build for its log, twice a second, until stopped. Which build:
 * the one in progress that started after `since` (the compile this command just asked for).
 */
function followBuildLog(algo: AlgoHandle, since: number, onLog: (logSoFar: string) => void): { stop(): Promise<void> } {
  let stopped = false;
  let wake: (() => void) | undefined;
  const loop = (async () => {
    while (!stopped) {
      try {
        const running = (await algo.builds()).find((b) => b.status === 'in-progress' && b.started_at !== null && Date.parse(b.started_at) >= since - 1000);
        if (running && !stopped) onLog(await algo.buildLogs(running.build_id));
      } catch {
        // Following is a courtesy: the compile's own answer carries the whole log anyway.
      }
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, 500);
      });
    }
  })();
  return {
    async stop() {
      stopped = true;
      wake?.();
      await loop;
    },
  };
}
