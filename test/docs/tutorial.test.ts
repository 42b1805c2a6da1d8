/**
 * docs/tutorial.md, executed as a newcomer would follow it: in an empty folder under the
 * OS temporary directory, with this repository's `npm pack` tarball standing in for the
 * registry's `sluice` (test/support/packed-sluice.ts, shared with test/package), the
 * page's files are written and its commands run in the page's order; what they print and
 * write is compared with the page's expected output, so the test fails when the page's
 * code, commands or output drift from what the product does. At the end the page's files
 * type-check (this repository's tsc, since TypeScript is not among the package's
 * dependencies, run on the page's own tsconfig.json in the project, so `sluice` resolves
 * to the installed package's declarations), and no command tried a non-loopback host
 * (test/infra/support/block-network.cjs is preloaded into every command but npm's).
 *
 * The convention: each fenced block's info string is its language and then what the test
 * does with it.
 *
 *   ```<lang> file=PATH   write the block to PATH (relative to the current folder).
 *   ```sh run             run each line in order; every command must exit 0. A line is
 *                         `mkdir D && cd D`, `npm init -y`, `npm install [-D] PKG...`
 *                         (`sluice`: the packed tarball; any other package at the version
 *                         this repository's devDependencies pin, so npm's cache serves it)
 *                         or `npx BIN ARG...` (BIN from the project's node_modules/.bin,
 *                         run with node, no shell: no quotes, pipes or variables). Anything
 *                         else fails the test. `# ...` after a command is a comment.
 *   ```sh dev             one `npx sluice dev ...`, started in the background with
 *                         `--port 0 --checkpoint-dir <temp dir>`; in later commands
 *                         `http://127.0.0.1:8080` becomes the URL it prints, and `npx sluice
 *                         status` gets the same --checkpoint-dir. It is stopped with SIGINT
 *                         (Ctrl-C) at its `output=dev stop` block, else at the end of its
 *                         section, and must exit 0.
 *   ```text expect=PATH   PATH holds exactly the block (lines compared, order included).
 *   ```text output        each non-empty line of the block is a line the last command
 *                         printed (stdout or stderr; compared trimmed, colours removed, in
 *                         any order); a line ending in `...` stands for any line that starts
 *                         with the text before the `...`.
 *   ```json output        the last command's stdout is one JSON object holding at least the
 *                         block's fields with the block's values (toMatchObject).
 *   ```text output=dev    as `output`, against what the dev process has printed so far,
 *                         waiting up to 30 s for the lines to appear.
 *   ```text output=dev stop
 *                         Ctrl-C first (SIGINT; exit code 0), then as `output=dev`.
 *   ```<lang> aws         not run, deliberately: deploying needs AWS credentials and an
 *                         account (this machine has neither). Only the `npx sluice` lines
 *                         are checked: the command exists and takes each option given
 *                         (its --help lists it).
 *
 * A block without one of these markers fails the test, so nothing the page shows goes
 * unchecked by accident. About 50 s on two busy cores with the tarball cached (packed
 * by test/package in the same run, or by an earlier run on unchanged sources), about
 * 80 s when it has to be packed.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { stripVTControlCharacters } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { devVersion, newProject, npmInstall, packedSluice, ROOT } from '../support/packed-sluice.ts';

const DOC = join(ROOT, 'docs/tutorial.md');
const BLOCK_NETWORK = join(ROOT, 'test/infra/support/block-network.cjs');
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');
const WORK = mkdtempSync(join(tmpdir(), 'sluice-tutorial-'));
const NETWORK_LOG = join(WORK, 'network.log');
const DEV_CHECKPOINTS = join(WORK, 'dev-checkpoints');
const DEFAULT_DEV_URL = 'http://127.0.0.1:8080';

interface Block {
  readonly lang: string;
  readonly attrs: ReadonlyMap<string, string | true>;
  readonly body: string;
  /** 1-based line of the opening fence, for messages. */
  readonly line: number;
}

interface Section {
  readonly title: string;
  readonly blocks: Block[];
}

const MARKERS = ['file', 'run', 'dev', 'expect', 'output', 'aws'];

/** The page's `## ` sections and their fenced blocks, in order. */
function parseDoc(text: string): Section[] {
  const sections: Section[] = [{ title: '(before the first section)', blocks: [] }];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const heading = /^## (.+)$/.exec(lines[i]!);
    if (heading) {
      sections.push({ title: heading[1]!.trim(), blocks: [] });
      continue;
    }
    const fence = /^```(\S*)(.*)$/.exec(lines[i]!);
    if (!fence) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    if (i >= lines.length) throw new Error(`docs/tutorial.md:${start + 1}: a code block that never ends`);
    const attrs = new Map<string, string | true>();
    for (const token of fence[2]!.trim().split(/\s+/).filter(Boolean)) {
      const eq = token.indexOf('=');
      attrs.set(eq < 0 ? token : token.slice(0, eq), eq < 0 ? true : token.slice(eq + 1));
    }
    sections.at(-1)!.blocks.push({ lang: fence[1]!, attrs, body: body.join('\n') + '\n', line: start + 1 });
  }
  return sections.filter((s) => s.blocks.length > 0);
}

const SECTIONS = parseDoc(readFileSync(DOC, 'utf8'));
const BLOCKS = SECTIONS.flatMap((s) => s.blocks);
const where = (b: Block) => `docs/tutorial.md:${b.line}`;

/** The commands of a shell block: one a line, without blank lines and comments. */
function commandsOf(block: Block): string[] {
  return block.body
    .split('\n')
    .map((l) => l.replace(/(^|\s)#.*$/, '').trim())
    .filter(Boolean);
}

interface Ran {
  readonly command: string;
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** A child process whose output is collected as it comes. */
interface Proc {
  readonly child: ChildProcess;
  stdout: string;
  stderr: string;
  readonly exit: Promise<number | null>;
}

/** The environment of the page's commands: not this test run's own vitest variables; network blocked but loopback. */
function commandEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('VITEST') && k !== 'NODE_OPTIONS') env[k] = v;
  return { ...env, NODE_OPTIONS: `--require ${BLOCK_NETWORK}`, SLUICE_NETWORK_LOG: NETWORK_LOG, AWS_EC2_METADATA_DISABLED: 'true' };
}

function start(file: string, args: readonly string[], cwd: string, env: NodeJS.ProcessEnv = commandEnv()): Proc {
  const child = spawn(process.execPath, [file, ...args], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const proc: Proc = {
    child,
    stdout: '',
    stderr: '',
    exit: new Promise((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (code, signal) => resolve(code ?? (signal ? -1 : null)));
    }),
  };
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (proc.stdout += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (proc.stderr += d));
  return proc;
}

const started: Proc[] = [];

async function run(file: string, args: readonly string[], cwd: string, command: string, timeoutMs = 240_000): Promise<Ran> {
  const proc = start(file, args, cwd);
  started.push(proc);
  const timer = setTimeout(() => proc.child.kill('SIGKILL'), timeoutMs);
  try {
    const code = await proc.exit;
    return { command, code, stdout: proc.stdout, stderr: proc.stderr };
  } finally {
    clearTimeout(timer);
  }
}

const printedLines = (...texts: string[]) =>
  texts
    .flatMap((t) => stripVTControlCharacters(t).split('\n'))
    .map((l) => l.trim())
    .filter(Boolean);

/** The block's lines that `printed` lacks (each printed line answers for one expected line). */
function missingLines(expected: string, printed: readonly string[]): string[] {
  const left = [...printed];
  const missing: string[] = [];
  for (const want of printedLines(expected)) {
    const prefix = want.endsWith('...') ? want.slice(0, -3) : undefined;
    const at = left.findIndex((l) => (prefix === undefined ? l === want : l.startsWith(prefix)));
    if (at < 0) missing.push(want);
    else left.splice(at, 1);
  }
  return missing;
}

const fileLines = (text: string) => text.split('\n').filter((l, i, all) => l !== '' || i < all.length - 1);

/** Where the page's commands are: the folder they run in, the last command, the dev process. */
const state = {
  cwd: WORK,
  tarball: '',
  last: undefined as Ran | undefined,
  dev: undefined as { proc: Proc; url: string; block: Block } | undefined,
  failed: undefined as string | undefined,
};

async function npx(block: Block, words: readonly string[], line: string): Promise<Ran> {
  const [bin, ...rest] = words;
  const link = join(state.cwd, 'node_modules/.bin', bin!);
  if (!existsSync(link)) throw new Error(`${where(block)}: \`${line}\`: ${bin} is not installed in the project (node_modules/.bin/${bin})`);
  let args = rest;
  if (state.dev) args = args.map((a) => (a === DEFAULT_DEV_URL ? state.dev!.url : a));
  else if (args.includes(DEFAULT_DEV_URL)) throw new Error(`${where(block)}: \`${line}\` publishes to sluice dev, but no dev block runs`);
  if (bin === 'sluice' && args[0] === 'status' && state.dev) args = [...args, '--checkpoint-dir', DEV_CHECKPOINTS];
  return run(realpathSync(link), args, state.cwd, line);
}

async function runLine(block: Block, line: string): Promise<void> {
  if (/["'`|<>$;&\\]/.test(line.replace(/ && /g, ' ')) || / && /.test(line.replace(/^mkdir \S+ && cd \S+$/, ''))) {
    throw new Error(`${where(block)}: \`${line}\`: the test runs commands without a shell (no quotes, pipes, redirections or variables)`);
  }
  const project = /^mkdir (\S+) && cd \1$/.exec(line);
  const words = line.split(/\s+/);
  if (project) {
    state.cwd = join(state.cwd, project[1]!);
    mkdirSync(state.cwd);
    return;
  }
  if (line === 'npm init -y') {
    newProject(state.cwd);
    return;
  }
  if (words[0] === 'npm' && words[1] === 'install') {
    const dev = words.includes('-D') || words.includes('--save-dev');
    const specs = words.slice(2).filter((w) => w !== '-D' && w !== '--save-dev');
    if (specs.some((s) => s.startsWith('-'))) throw new Error(`${where(block)}: \`${line}\`: only -D/--save-dev are understood`);
    const resolved = specs.map((s) => {
      const name = s.replace(/(?<=.)@[^@/]*$/, '');
      return name === 'sluice' ? state.tarball : devVersion(name);
    });
    npmInstall(state.cwd, resolved, { dev });
    return;
  }
  if (words[0] === 'npx') {
    const ran = await npx(block, words.slice(1), line);
    state.last = ran;
    expect(ran.code, `${where(block)}: \`${line}\` exited ${ran.code}:\n${ran.stdout.slice(-2000)}\n${ran.stderr.slice(-4000)}`).toBe(0);
    return;
  }
  throw new Error(`${where(block)}: \`${line}\`: not a command the test knows how to run (see its header comment)`);
}

async function startDev(block: Block): Promise<void> {
  const lines = commandsOf(block);
  expect(lines.length, `${where(block)}: a dev block holds one command`).toBe(1);
  const words = lines[0]!.split(/\s+/);
  expect(words.slice(0, 3), `${where(block)}: a dev block runs \`npx sluice dev\``).toEqual(['npx', 'sluice', 'dev']);
  const proc = start(realpathSync(join(state.cwd, 'node_modules/.bin/sluice')), [...words.slice(2), '--port', '0', '--checkpoint-dir', DEV_CHECKPOINTS], state.cwd);
  started.push(proc);
  const deadline = Date.now() + 90_000;
  let url: string | undefined;
  while (!(url = /ingestion endpoint (http:\/\/\S+)/.exec(proc.stderr)?.[1])) {
    if (proc.child.exitCode !== null || Date.now() > deadline) throw new Error(`${where(block)}: sluice dev printed no endpoint (exit ${proc.child.exitCode}):\n${proc.stderr}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  state.dev = { proc, url, block };
}

async function stopDev(): Promise<void> {
  const dev = state.dev;
  if (!dev) return;
  state.dev = undefined;
  dev.proc.child.kill('SIGINT');
  const timer = setTimeout(() => dev.proc.child.kill('SIGKILL'), 60_000);
  const code = await dev.proc.exit.finally(() => clearTimeout(timer));
  expect(code, `${where(dev.block)}: sluice dev after Ctrl-C exited ${code}:\n${dev.proc.stderr.slice(-3000)}`).toBe(0);
  state.last = { command: 'sluice dev (stopped)', code, stdout: dev.proc.stdout, stderr: dev.proc.stderr };
}

async function expectDevOutput(block: Block): Promise<void> {
  if (block.attrs.get('stop') === true) {
    expect(state.dev, `${where(block)}: output=dev stop, but no dev process runs`).toBeDefined();
    const { proc } = state.dev!;
    await stopDev();
    expect(missingLines(block.body, printedLines(proc.stdout, proc.stderr)), `${where(block)}: lines sluice dev did not print by its stop:\n${proc.stdout}\n${proc.stderr.slice(-3000)}`).toEqual([]);
    return;
  }
  expect(state.dev, `${where(block)}: output=dev, but no dev process runs`).toBeDefined();
  const { proc } = state.dev!;
  const deadline = Date.now() + 30_000;
  let missing = missingLines(block.body, printedLines(proc.stdout, proc.stderr));
  while (missing.length > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
    missing = missingLines(block.body, printedLines(proc.stdout, proc.stderr));
  }
  expect(missing, `${where(block)}: lines sluice dev did not print within 30 s:\n${proc.stdout}\n${proc.stderr.slice(-3000)}`).toEqual([]);
}

/** Options a sluice command's --help lists. */
const helpOptions = new Map<string, Promise<Set<string>>>();
function optionsOf(command: string): Promise<Set<string>> {
  if (!helpOptions.has(command)) {
    helpOptions.set(
      command,
      run(realpathSync(join(state.cwd, 'node_modules/.bin/sluice')), [command, '--help'], state.cwd, `sluice ${command} --help`).then((r) => {
        if (r.code !== 0) throw new Error(`sluice ${command} --help exited ${r.code}: ${r.stderr}`);
        return new Set([...r.stdout.matchAll(/(?<![\w-])--[a-z][a-z-]*/g)].map((m) => m[0]));
      }),
    );
  }
  return helpOptions.get(command)!;
}

async function checkAwsBlock(block: Block): Promise<void> {
  for (const line of commandsOf(block)) {
    const words = line.split(/\s+/);
    if (words[0] !== 'npx' || words[1] !== 'sluice') continue;
    const options = await optionsOf(words[2]!);
    for (const word of words.slice(3).filter((w) => w.startsWith('--'))) expect(options, `${where(block)}: \`${line}\`: sluice ${words[2]} has no option ${word}`).toContain(word.split('=')[0]);
  }
}

async function step(block: Block): Promise<void> {
  const file = block.attrs.get('file');
  const expectFile = block.attrs.get('expect');
  const output = block.attrs.get('output');
  if (typeof file === 'string') {
    mkdirSync(dirname(join(state.cwd, file)), { recursive: true });
    writeFileSync(join(state.cwd, file), block.body);
  } else if (block.attrs.has('run')) {
    for (const line of commandsOf(block)) await runLine(block, line);
  } else if (block.attrs.has('dev')) {
    await startDev(block);
  } else if (typeof expectFile === 'string') {
    const path = join(state.cwd, expectFile);
    expect(existsSync(path), `${where(block)}: ${expectFile} was not written`).toBe(true);
    expect(fileLines(readFileSync(path, 'utf8')), `${where(block)}: ${expectFile}`).toEqual(fileLines(block.body));
  } else if (output === 'dev') {
    await expectDevOutput(block);
  } else if (output === true) {
    const last = state.last;
    expect(last, `${where(block)}: an output block before any command`).toBeDefined();
    if (block.lang === 'json') {
      let printed: unknown;
      expect(() => (printed = JSON.parse(last!.stdout.trim())), `${where(block)}: \`${last!.command}\` printed no JSON object: ${last!.stdout}`).not.toThrow();
      expect(printed, `${where(block)}: \`${last!.command}\` --json`).toMatchObject(JSON.parse(block.body) as object);
    } else {
      expect(missingLines(block.body, printedLines(last!.stdout, last!.stderr)), `${where(block)}: lines \`${last!.command}\` did not print:\n${last!.stdout}\n${last!.stderr.slice(-3000)}`).toEqual([]);
    }
  } else if (block.attrs.has('aws')) {
    await checkAwsBlock(block);
  } else {
    throw new Error(`${where(block)}: a block with no marker the test knows (${MARKERS.join(', ')}): \`\`\`${block.lang} ${[...block.attrs.keys()].join(' ')}`);
  }
}

beforeAll(() => {
  state.tarball = packedSluice();
}, 600_000);

afterAll(async () => {
  for (const p of started) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  await Promise.allSettled(started.map((p) => p.exit));
  rmSync(WORK, { recursive: true, force: true });
});

describe('docs/tutorial.md, followed from an empty folder', () => {
  it('marks every code block, and has the steps this test runs', () => {
    for (const b of BLOCKS) expect(MARKERS.filter((m) => b.attrs.has(m)), `${where(b)}: one marker of ${MARKERS.join(', ')}`).toHaveLength(1);
    const files = BLOCKS.map((b) => b.attrs.get('file')).filter((f) => typeof f === 'string');
    expect(files).toEqual(expect.arrayContaining(['tsconfig.json', 'jobs/clicks.ts', 'clicks.jsonl', 'test/clicks.test.ts']));
    const commands = (marker: string) => BLOCKS.filter((b) => b.attrs.has(marker)).flatMap(commandsOf);
    expect(commands('run')).toEqual(expect.arrayContaining(['npm install sluice', 'npx sluice run jobs/clicks.ts --input clicks.jsonl --output counts.jsonl', 'npx vitest run', 'npx sluice synth jobs/clicks.ts']));
    expect(commands('run').some((c) => c.startsWith('npx sluice publish clicks '))).toBe(true);
    expect(commands('run').some((c) => c.startsWith('npx sluice status '))).toBe(true);
    expect(commands('dev')).toEqual(['npx sluice dev jobs/clicks.ts']);
    expect(BLOCKS.some((b) => b.attrs.get('expect') === 'counts.jsonl')).toBe(true);
    expect(BLOCKS.some((b) => b.attrs.get('output') === 'dev' && b.attrs.get('stop') === true)).toBe(true);
    for (const aws of ['npx sluice deploy ', 'npx sluice publish ', 'npx sluice destroy ']) expect(commands('aws').some((c) => c.startsWith(aws)), aws).toBe(true);
  });

  for (const section of SECTIONS) {
    it(
      `${section.title}`,
      async () => {
        expect(state.failed, 'an earlier section failed').toBeUndefined();
        try {
          for (const block of section.blocks) await step(block);
          if (state.dev) await stopDev();
        } catch (e) {
          state.failed = section.title;
          throw e;
        }
      },
      300_000,
    );
  }

  // Deliberately not run: the `aws` blocks deploy to, publish to and destroy a stack in an AWS
  // account (credentials, `cdk bootstrap`, money). Their sluice options are checked above.
  it.skip(`the aws blocks on AWS: ${BLOCKS.filter((b) => b.attrs.has('aws')).flatMap(commandsOf).filter((c) => c.startsWith('npx sluice ')).map((c) => c.split(' ').slice(1, 3).join(' ')).join(', ')} (they need AWS credentials)`, () => {});

  it('the page\'s files type-check against the installed package, and no command reached beyond loopback', async () => {
    expect(state.failed, 'an earlier section failed').toBeUndefined();
    const tsconfig = join(state.cwd, 'tsconfig.json');
    expect(existsSync(tsconfig)).toBe(true);
    const env = { ...commandEnv(), NODE_OPTIONS: '' };
    const tsc = spawn(process.execPath, [TSC, '-p', tsconfig, '--listFiles'], { cwd: state.cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    tsc.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    tsc.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
    const code = await new Promise<number | null>((resolve) => tsc.once('close', resolve));
    expect(code, out.split('\n').filter((l) => !l.startsWith('/')).join('\n')).toBe(0);
    const listed = out.split('\n');
    const project = realpathSync(state.cwd);
    for (const f of ['jobs/clicks.ts', 'test/clicks.test.ts', 'node_modules/sluice/dist/lib/index.d.ts', 'node_modules/sluice/dist/lib/testing/index.d.ts']) {
      expect(listed.some((l) => l === join(project, f) || l === join(state.cwd, f)), `tsc checked ${f}`).toBe(true);
    }
    expect(existsSync(NETWORK_LOG) ? readFileSync(NETWORK_LOG, 'utf8') : '').toBe('');
  }, 120_000);
});
