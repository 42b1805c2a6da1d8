/**
 * `sluice <args>` parsed by the real program (lib/cli/main.ts, evaluated afresh for each
 * call) inside the test process, for tests of help texts, parse errors and the errors a
 * command reports before it does any work: a child's start-up (the TypeScript loader)
 * costs about a second, the parse a few milliseconds. process.argv, process.exit,
 * process.exitCode and the standard streams stand in for a child's; the streams read as
 * pipes (no TTY), as they do for a spawned child, so commander wraps help at 80 columns.
 *
 * What depends on the process itself (the exit status the OS reports, output flushed
 * before exit, the modules a start loads) keeps spawning bin/sluice.js (helpers.ts).
 */
import { join } from 'node:path';
import { vi } from 'vitest';
import { type CliResult, ROOT } from './helpers.ts';

/** Thrown by the stand-in process.exit: unwinds the program as the real exit would end it. */
class Exited extends Error {
  constructor(readonly code: number) {
    super(`process.exit(${code})`);
  }
}

/** One call at a time: the calls share this process's argv, exit and streams. */
let queue: Promise<unknown> = Promise.resolve();

export function sluiceInProcess(args: readonly string[]): Promise<CliResult> {
  const call = queue.then(() => parseOnce(args));
  queue = call.catch(() => undefined);
  return call;
}

const writer = (sink: (s: string) => void) =>
  ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    sink(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8'));
    const done = rest.find((r) => typeof r === 'function') as (() => void) | undefined;
    done?.();
    return true;
  }) as typeof process.stdout.write;

async function parseOnce(args: readonly string[]): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const argv = process.argv;
  const exitCode = process.exitCode;
  const streams = [process.stdout, process.stderr];
  const ttys = streams.map((s) => Object.getOwnPropertyDescriptor(s, 'isTTY'));
  const spies = [
    vi.spyOn(process, 'exit').mockImplementation((code) => {
      throw new Exited(Number(code ?? process.exitCode ?? 0));
    }),
    vi.spyOn(process.stdout, 'write').mockImplementation(writer((s) => (stdout += s))),
    vi.spyOn(process.stderr, 'write').mockImplementation(writer((s) => (stderr += s))),
  ];
  for (const s of streams) Object.defineProperty(s, 'isTTY', { value: false, configurable: true, writable: true });
  process.argv = [process.execPath, join(ROOT, 'bin/sluice.js'), ...args];
  process.exitCode = undefined;
  let code: number;
  try {
    vi.resetModules();
    await import('../../lib/cli/main.ts');
    code = Number(process.exitCode ?? 0);
  } catch (e) {
    if (!(e instanceof Exited)) throw e;
    code = e.code;
  } finally {
    for (const spy of spies) spy.mockRestore();
    streams.forEach((s, i) => {
      const d = ttys[i];
      if (d) Object.defineProperty(s, 'isTTY', d);
      else delete (s as { isTTY?: boolean }).isTTY;
    });
    process.argv = argv;
    process.exitCode = exitCode;
  }
  return { code, stdout, stderr };
}
