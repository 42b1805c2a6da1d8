/**
 * Every command and subcommand `sluice --help` lists, found from the help itself (so a new
 * command is covered without editing this file): a mistyped option of its own exits with
 * the usage code naming the nearest option (as JSON on stdout with --json), and a missing
 * argument exits with the usage code naming the argument. Parsed in this process
 * (in-process.ts); help.test.ts spawns the bin for the exit code the process reports.
 */
import { describe, expect, it } from 'vitest';
import { EXIT } from '../../lib/cli/exit-codes.ts';
import { sluiceInProcess as sluice } from './in-process.ts';

interface Usage {
  path: string[];
  /** Long options other than --help, as the help lists them. */
  options: string[];
  /** `<name>` arguments of the usage line. */
  required: string[];
}

function subcommandsOf(help: string): string[] {
  const section = help.split('Commands:\n')[1]?.split('\n\n')[0] ?? '';
  return [...section.matchAll(/^ {2}([a-z]+) /gm)].map((m) => m[1]!).filter((c) => c !== 'help');
}

async function usages(path: string[] = []): Promise<Usage[]> {
  const r = await sluice([...path, '--help']);
  expect(r.code, `${path.join(' ')} --help`).toBe(EXIT.ok);
  const subs = subcommandsOf(r.stdout);
  const nested = (await Promise.all(subs.map((s) => usages([...path, s])))).flat();
  if (path.length === 0 || subs.length) return nested;
  const optionsPart = r.stdout.split('Options:\n')[1]!.split('\nExamples:\n')[0]!;
  const options = [...optionsPart.matchAll(/^ {2}(?:-\w, )?(--[a-z][a-z-]+)/gm)].map((m) => m[1]!).filter((o) => o !== '--help');
  const usageLine = r.stdout.split('\n')[0]!;
  const required = [...usageLine.matchAll(/<([a-z]+)>/g)].map((m) => m[1]!);
  return [...nested, { path, options, required }];
}

/** `--json` -> `--jsno`: two letters swapped, still nearest to the original. */
const mistype = (option: string): string => option.slice(0, -2) + option.at(-1) + option.at(-2);

describe('bad input to every command and subcommand', () => {
  it('a mistyped option: exit 2, the nearest option named, JSON with --json; a missing argument: exit 2, the argument named', { timeout: 180_000 }, async () => {
    const all = await usages();
    const names = all.map((u) => u.path.join(' '));
    expect(names).toEqual(expect.arrayContaining(['run', 'dev', 'publish', 'synth', 'deploy', 'destroy', 'demo', 'status', 'state get', 'checkpoints', 'savepoint', 'restore']));
    for (const u of all) {
      const name = u.path.join(' ');
      expect(u.options.length, name).toBeGreaterThan(0);
      const option = u.options.find((o) => o !== '--json' && o.length > 5) ?? u.options[0]!;
      const typo = mistype(option);
      const json = u.options.includes('--json');
      const r = await sluice([...u.path, typo, 'x', ...(json ? ['--json'] : [])]);
      expect(r.code, `${name} ${typo}: ${r.stderr}`).toBe(EXIT.usage);
      // Commander lists every option at the nearest distance: `--lable` -> "one of --label, --table".
      const suggestion = r.stderr.match(new RegExp(`error: unknown option '${typo}'\\n\\(Did you mean (?:one of )?([^?]+)\\?\\)`));
      expect(suggestion, `${name} ${typo}: ${r.stderr}`).not.toBeNull();
      expect(suggestion![1]!.split(', '), name).toContain(option);
      if (json) expect(JSON.parse(r.stdout), name).toEqual({ error: { kind: 'usage', message: suggestion![0].slice('error: '.length) } });
      if (!u.required.length) continue;
      const missing = await sluice(u.path);
      expect(missing.code, `${name} with no arguments: ${missing.stderr}`).toBe(EXIT.usage);
      expect(missing.stderr, name).toContain(`error: missing required argument '${u.required[0]}'`);
    }
  });
});
