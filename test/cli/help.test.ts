/**
 * The `sluice` program itself: --version, an "Examples:" section in every command's --help,
 * parse errors (unknown or mistyped commands and options, with the nearest match, before any
 * required-option check) exiting with the usage code, and --help loading no runtime module.
 * The cases parse in this process (in-process.ts); one spawn of bin/sluice.js per exit code
 * checks what the process itself reports.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { EXIT } from '../../lib/cli/exit-codes.ts';
import { packageVersion } from '../../lib/cli/program.ts';
import { ROOT, sluice } from './helpers.ts';
import { sluiceInProcess } from './in-process.ts';

const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

/** The commands `sluice --help` lists (all but `help`). */
function commandsOf(help: string): string[] {
  const section = help.split('Commands:\n')[1]!.split('\n\n')[0]!;
  return [...section.matchAll(/^ {2}([a-z]+) /gm)].map((m) => m[1]!).filter((c) => c !== 'help');
}

describe('sluice --version', () => {
  it("prints package.json's version, with -V too, and exits 0", async () => {
    for (const [flag, run] of [['--version', sluice], ['-V', sluiceInProcess]] as const) {
      const r = await run([flag]);
      expect(r.code).toBe(EXIT.ok);
      expect(r.stdout).toBe(`${VERSION}\n`);
    }
  });

  it('finds the package.json above an installed dist/lib/cli/main.js too', () => {
    expect(packageVersion(new URL('../../dist/lib/cli/main.js', import.meta.url).href)).toBe(VERSION);
    expect(packageVersion('file:///nonexistent/a/b/c.js')).toBe('unknown');
  });
});

describe('sluice --help', () => {
  it('every command has examples in its --help, and they name the command', async () => {
    const top = await sluice(['--help']);
    expect(top.code).toBe(EXIT.ok);
    expect(top.stdout).toContain('Examples:\n  $ sluice ');
    const commands = commandsOf(top.stdout);
    expect(commands).toEqual(expect.arrayContaining(['run', 'dev', 'publish', 'synth', 'deploy', 'destroy', 'demo', 'checkpoints', 'savepoint', 'restore']));
    for (const c of commands) {
      const r = await sluiceInProcess([c, '--help']);
      expect(r.code, c).toBe(EXIT.ok);
      const examples = r.stdout.split('\nExamples:\n')[1];
      expect(examples, `${c} --help`).toBeDefined();
      for (const line of examples!.split('\n').filter((l) => l.trim())) expect(line, c).toMatch(new RegExp(`^ {2}\\$ (\\S+=\\S+ )?sluice ${c}( |$)`));
    }
  });

  it('loads no runtime, AWS or CDK module', async () => {
    const { stderr } = await promisify(execFile)(process.execPath, ['bin/sluice.js', '--help'], { cwd: ROOT, env: { ...process.env, NODE_DEBUG: 'esm' } });
    const loaded = [...new Set([...stderr.matchAll(/Storing (file:\/\/\S+)/g)].map((m) => m[1]!))];
    const ours = loaded.filter((u) => u.startsWith(new URL('../../', import.meta.url).href)).map((u) => u.slice(new URL('../../', import.meta.url).href.length)).filter((f) => !f.startsWith('node_modules/'));
    expect(ours).toContain('lib/cli/main.ts'); // the trace works on this Node
    const allowed = ['bin/sluice.js', 'lib/cli/main.ts', 'lib/cli/program.ts', 'lib/cli/exit-codes.ts', 'lib/cli/targets.ts', 'lib/cli/checkpoint-commands.ts', 'lib/errors.ts'];
    expect(ours.filter((f) => !allowed.includes(f))).toEqual([]);
    expect(loaded.filter((u) => /node_modules\/(@aws-sdk|aws-cdk-lib|zod)\//.test(u))).toEqual([]);
  });
});

describe('parse errors: exit 2, the nearest match, before required options', () => {
  const cases: [string, string[], RegExp, RegExp?][] = [
    ['a mistyped option', ['run', 'examples/nexmark/q5.ts', '--inptu', 'x.jsonl'], /error: unknown option '--inptu'\n\(Did you mean --input\?\)/, /required option/],
    ['a mistyped option with =', ['run', 'examples/nexmark/q5.ts', '--ouptut=o.jsonl', '--input', 'x.jsonl'], /unknown option '--ouptut'\n\(Did you mean --output\?\)/, /required option/],
    ['a mistyped command', ['rnu', 'examples/nexmark/q5.ts'], /error: unknown command 'rnu'\n\(Did you mean run\?\)/],
    ['a mistyped top-level option', ['--verison'], /unknown option '--verison'\n\(Did you mean --version\?\)/],
    ['a missing required option', ['run', 'examples/nexmark/q5.ts', '--input', 'x.jsonl'], /error: required option '--output <file>' not specified/],
    ['a missing argument', ['checkpoints'], /error: missing required argument 'job'/],
    ['a value not among the choices', ['run', 'examples/nexmark/q5.ts', '--input', 'a', '--output', 'b', '--target', 'lambda'], /argument 'lambda' is invalid. Allowed choices are embedded, local-aws, assembly/],
    ['too many arguments', ['checkpoints', 'a.ts', 'b.ts'], /too many arguments for 'checkpoints'/],
    ['no command', [], /Usage: sluice/],
    ['a mistyped subcommand', ['state', 'gte', 'a.ts', 'op', 'k'], /error: unknown command 'gte'\n\(Did you mean get\?\)/],
    ['a command group without its subcommand', ['state'], /Usage: sluice state/],
  ];
  it.each(cases)('%s', async (_name, args, message, absent) => {
    const r = await sluiceInProcess(args);
    expect(r.code, r.stderr).toBe(EXIT.usage);
    expect(r.stderr).toMatch(message);
    if (absent) expect(r.stderr).not.toMatch(absent);
  });

  it('the process exits with the usage code, the error on stderr', async () => {
    const r = await sluice(cases[0]![1]);
    expect(r.code, r.stderr).toBe(EXIT.usage);
    expect(r.stderr).toMatch(cases[0]![2]);
  });

  it('with --json, the error is also a JSON object on stdout', async () => {
    const r = await sluiceInProcess(['checkpoints', 'examples/nexmark/q5.ts', '--json', '--targte', 'aws']);
    expect(r.code).toBe(EXIT.usage);
    expect(JSON.parse(r.stdout)).toEqual({ error: { kind: 'usage', message: "unknown option '--targte'\n(Did you mean --target?)" } });
  });
});

describe('bad input to every command: exit 1, the flag named, and with --json the error as JSON', () => {
  const none = 'examples/none.ts';
  const cases: [string, string[], RegExp][] = [
    ['dev', ['dev', 'examples/first-job.ts', '--port', '99999'], /--port: expected an integer from 0 to 65535/],
    ['publish', ['publish', 'views', '/nonexistent/views.jsonl', '--url', 'http://127.0.0.1:9'], /nonexistent\/views\.jsonl/],
    ['deploy', ['deploy', none], /<job>: expected a path to a job module/],
    ['destroy', ['destroy', none], /<job>: expected a path to a job module/],
    ['checkpoints', ['checkpoints', none], /<job>: expected a path to a job module/],
    ['savepoint', ['savepoint', 'examples/first-job.ts', '--checkpoint-dir', '/nonexistent/ck'], /<job>: expected a job running under `sluice dev` with checkpoints in \/nonexistent\/ck/],
    ['restore', ['restore', 'examples/first-job.ts', '--from', 'x', '--input', 'package.json'], /--output: expected --input and --output together/],
    ['status', ['status', 'examples/first-job.ts', '--checkpoint-dir', '/nonexistent/ck'], /<job>: expected a job running under `sluice dev`.*received no \/nonexistent\/ck\/dev\.json/],
    ['state get', ['state', 'get', 'examples/first-job.ts', 'x', 'k', '--checkpoint-dir', '/nonexistent/ck'], /<operator>: expected an operator of job "page-views"/],
  ];
  it.each(cases)('%s', async (_name, args, message) => {
    const r = await sluiceInProcess(args);
    expect(r.code, r.stderr).toBe(EXIT.error);
    expect(r.stderr).toMatch(message);
    const j = await sluiceInProcess([...args, '--json']);
    expect(j.code).toBe(EXIT.error);
    expect(JSON.parse(j.stdout.trim().split('\n').at(-1)!).error).toMatchObject({ kind: 'error', message: expect.stringMatching(message) });
  });

  it('the process exits 1, the JSON error flushed to stdout before it exits', async () => {
    const [, args, message] = cases.find(([name]) => name === 'checkpoints')!;
    const r = await sluice([...args, '--json']);
    expect(r.code, r.stderr).toBe(EXIT.error);
    expect(r.stderr).toMatch(message);
    expect(JSON.parse(r.stdout.trim().split('\n').at(-1)!).error).toMatchObject({ kind: 'error', message: expect.stringMatching(message) });
  });
});
