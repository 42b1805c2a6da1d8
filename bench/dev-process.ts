/**
 * A `sluice dev` child process for the load benchmarks (bench/overload.ts,
 * bench/scaling-advice.ts): started on a job module with flags, read through GET /stats,
 * its memory read from /proc, stopped with SIGINT (a final checkpoint, then exit).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { DevStatus } from '../lib/cli/status-shape.ts';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

export interface DevProcess {
  readonly child: ChildProcess;
  readonly url: string;
  readonly pid: number;
  stats(): Promise<DevStatus>;
  stderr(): string;
  /** SIGINT, then the exit code (SIGKILL after 60 s). */
  stop(): Promise<number | null>;
}

/** `sluice dev <job> --port 0 --checkpoint-dir <a temporary directory> ...args`. */
export async function startDev(job: string, args: readonly string[]): Promise<DevProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-bench-dev-'));
  const child = spawn(process.execPath, ['bin/sluice.js', 'dev', job, '--port', '0', '--checkpoint-dir', dir, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  child.stdout!.resume();
  const exited = new Promise<number | null>((r) => child.once('close', (code) => r(code)));
  const deadline = Date.now() + 60_000;
  let url: string | undefined;
  while (!url) {
    url = /ingestion endpoint (http:\/\/\S+)/.exec(err)?.[1];
    if (url) break;
    if (Date.now() > deadline || child.exitCode !== null) {
      child.kill('SIGKILL');
      throw new Error(`sluice dev did not start: ${err}`);
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  const stats = async () => (await (await fetch(`${url}/stats`)).json()) as DevStatus;
  const pid = (await stats()).pid;
  return {
    child,
    url,
    pid,
    stats,
    stderr: () => err,
    stop: async () => {
      child.kill('SIGINT');
      const kill = setTimeout(() => child.kill('SIGKILL'), 60_000);
      const code = await exited;
      clearTimeout(kill);
      rmSync(dir, { recursive: true, force: true });
      return code;
    },
  };
}

/** VmRSS and VmHWM (peak) of `pid` in bytes, from /proc/<pid>/status. */
export function memoryOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
  return { rss: kb('VmRSS'), peak: kb('VmHWM') };
}

/** Polls `read` every `everyMs` until `done` holds for its value (rejects after `timeoutMs`). */
export async function pollUntil<T>(read: () => Promise<T>, done: (v: T) => boolean, timeoutMs: number, everyMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await read();
    if (done(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms; last value: ${JSON.stringify(v).slice(0, 400)}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
export const int = (n: number) => Math.round(n).toLocaleString('en-US');

/** Prints `PASS|FAIL name: detail`, and remembers a failure. */
export class Verdicts {
  failed = 0;
  check(name: string, ok: boolean, detail: string): void {
    if (!ok) this.failed++;
    console.log(`${ok ? 'PASS' : 'FAIL'} ${name}: ${detail}`);
  }
}
