/**
 * How the `sluice` program parses: its version, help examples, and errors. Loaded by
 * main.ts before any command runs, so it imports commander and node:fs only.
 *
 * Commander checks required options before it looks for unknown ones, so `--inptu x`
 * would read "required option '--input' not specified". Here required options are
 * checked after parsing (a preAction hook), so an unknown or mistyped option is reported
 * first, with the nearest known one; and every parse error exits with EXIT.usage.
 */
import { readFileSync } from 'node:fs';
import type { Command, CommanderError, Option } from 'commander';
import { EXIT } from './exit-codes.ts';

/** The version in Sluice's package.json: lib/cli/ in the repository, dist/lib/cli/ installed. */
export function packageVersion(from: string = import.meta.url): string {
  for (let dir = new URL('./', from), i = 0; i < 5; dir = new URL('../', dir), i++) {
    try {
      const pkg = JSON.parse(readFileSync(new URL('package.json', dir), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'sluice' && pkg.version) return pkg.version;
    } catch {
      // no package.json at this level
    }
  }
  return 'unknown';
}

/** An "Examples:" section for a command's --help. */
export function examples(...lines: string[]): string {
  return `\nExamples:\n${lines.map((l) => `  $ ${l}`).join('\n')}\n`;
}

/** Whether the command line asks for JSON output (errors then also go to stdout as JSON). */
export const wantsJson = (argv: readonly string[] = process.argv): boolean => argv.includes('--json');

/** The JSON of a failed command: `{"error": {"kind", "message", "field"?, "expected"?, "received"?}}`. */
export function errorJson(kind: 'usage' | 'error', err: unknown): string {
  const e = err as { message?: string; field?: string; expected?: string; received?: string; code?: string };
  const error: Record<string, string> = { kind, message: (e.message ?? String(err)).replace(/^error: /, '') };
  if (kind === 'error' && typeof e.code === 'string') error.code = e.code;
  for (const k of ['field', 'expected', 'received'] as const) if (typeof e[k] === 'string') error[k] = e[k];
  return JSON.stringify({ error });
}

function allCommands(cmd: Command): Command[] {
  return [cmd, ...cmd.commands.flatMap(allCommands)];
}

/** Call once every command is registered: see the module comment. */
export function strictParsing(program: Command): void {
  const deferred = new Map<Command, Option[]>();
  const exit = (err: CommanderError): never => {
    // --help and --version exit 0; everything else commander refuses is a usage error.
    const code = err.exitCode === 0 ? EXIT.ok : EXIT.usage;
    if (code !== EXIT.ok && wantsJson()) process.stdout.write(errorJson('usage', err) + '\n');
    process.exit(code);
  };
  for (const cmd of allCommands(program)) {
    cmd.exitOverride(exit);
    // Commander suggests the nearest option only for a bare flag: `--ouptut=x` is reported as `--ouptut`.
    const c = cmd as unknown as { unknownOption(flag: string): void };
    const unknownOption = c.unknownOption.bind(cmd);
    c.unknownOption = (flag) => unknownOption(flag.startsWith('--') ? flag.split('=')[0]! : flag);
    const required = cmd.options.filter((o) => o.mandatory);
    for (const o of required) o.makeOptionMandatory(false);
    if (required.length) deferred.set(cmd, required);
  }
  program.hook('preAction', (_program, command) => {
    for (const o of deferred.get(command) ?? []) {
      if (command.getOptionValue(o.attributeName()) === undefined) {
        command.error(`error: required option '${o.flags}' not specified`, { exitCode: EXIT.usage, code: 'commander.missingMandatoryOptionValue' });
      }
    }
  });
}
